import pytest

from covey.tasks import Mixture, get_task

SPEC = {"arith": {"name": "arithmetic"}, "count": {"name": "countdown", "n_train": 6, "n_test": 4}}


def test_splits_concatenate_the_domains_with_their_tags():
    mix = Mixture(tasks=SPEC, per_domain={"test": 3})
    test = mix.examples("test")
    assert [(x["id"], x["domain"], x["domain_id"]) for x in test] == [
        (0, "arith", 0), (1, "arith", 1), (2, "arith", 2), (3, "count", 0), (4, "count", 1), (5, "count", 2)]
    arith = get_task("arithmetic").examples("test")
    assert test[1]["prompt"] == arith[1]["prompt"] and test[1]["answer"] == arith[1]["answer"]
    train = mix.examples("train")
    assert len(train) == 100 + 6 and [x["id"] for x in train] == list(range(106))
    assert [x["domain"] for x in train[:10]] != ["arith"] * 10                     # shuffled
    assert train == Mixture(tasks=SPEC, per_domain={"test": 3}).examples("train")  # same seed, same order
    assert train != Mixture(tasks=SPEC, seed=1).examples("train")
    unshuffled = Mixture(tasks=SPEC, shuffle=False, per_domain=2).examples("train")
    assert [x["domain"] for x in unshuffled] == ["arith", "arith", "count", "count"]


def test_reward_sends_each_row_to_its_domain_verifier():
    mix = Mixture(tasks=SPEC, per_domain=2)
    a0, a1, c0, c1 = mix.examples("test")
    rows = [c0, a0, c1, a1]
    completions = [f"<answer> {c0['solution']} </answer>", a0["answer"], "<answer> 1 + 1 </answer>", "no number"]
    columns = {k: [r.get(k) for r in rows] for k in dict.fromkeys(k for r in rows for k in r if k not in ("id", "prompt"))}
    assert mix.reward([r["prompt"] for r in rows], completions, **columns) == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown mixture domain"):
        mix.reward(["p"], ["1"], domain=["code"], answer=["1"])


def test_list_of_names_and_demonstrations():
    mix = get_task("mixture", tasks=["arithmetic", "countdown"], per_domain=1)
    assert mix.domains == ["arithmetic", "countdown"]
    a, c = mix.examples("test")
    assert mix.demonstration(c) == f"<answer> {c['solution']} </answer>"
    assert "arithmetic:" in mix.answer_format and "countdown:" in mix.answer_format


@pytest.mark.parametrize("bad", [
    {"tasks": {}}, {"tasks": {"a": {"params": {}}}}, {"tasks": {"m": {"name": "mixture", "tasks": ["arithmetic"]}}},
    {"tasks": ["arithmetic"], "per_domain": 0}, {"tasks": ["arithmetic"], "per_domain": {"dev": 3}},
    {"tasks": {"a": {"name": "arithmetic", "digits": 0}}},
])
def test_bad_specs_fail(bad):
    with pytest.raises(ValueError):
        Mixture(**bad)
