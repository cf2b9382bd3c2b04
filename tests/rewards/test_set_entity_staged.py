"""ps_grpo, consistency, entity_match, staged and medix against the spec's vectors and their edge cases, alone and through the runner."""

import math

import pytest

from covey.rewards import RewardRunner, get_reward
from covey.rewards.judge.medix import medix_parts
from covey.rewards.sets import extract_items, set_entropy
from covey.rewards.text import token_f1


# ------------------------------------------------------------------ ps_grpo
PS = dict(prompts=["q1", "q1", "q2", "q2"],
          completions=["paris is the capital", "the capital is paris", "paris", "lyon is the capital"],
          group=[0, 0, 1, 1], paraphrase_set=[5, 5, 5, 5])


def test_ps_grpo_exact_spec_vector():
    out = get_reward("ps_grpo")(**PS)
    assert out.scores == pytest.approx([0.575, 0.575, 0.4, 0.75])
    assert token_f1("paris is the capital", "paris", articles=True) == pytest.approx(2 * (1 / 3) / (4 / 3))


def test_ps_grpo_sets_of_unequal_size_alone_and_the_runner_keeps_sets_whole():
    kw = dict(prompts=["a"] * 3 + ["b"] * 2 + ["c"], completions=["x y", "x", "y", "x y", "z", "x"],
              group=[0, 0, 0, 1, 1, 2], paraphrase_set=["s", "s", "s", "s", "s", "t"])
    out = get_reward("ps_grpo")(**kw)
    assert out.scores[5] is None  # set t has one paraphrase
    assert out.scores[0] == pytest.approx((1.0 + 0.0) / 2) and out.scores[3] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)
    assert get_reward("ps_grpo", alone="zero")(**kw).scores[5] == 0.0
    runner = RewardRunner([{"name": "ps_grpo"}], workers=0, chunk_size=1)  # chunks follow paraphrase_set, not group
    batch = runner(kw["prompts"], kw["completions"], group=kw["group"], paraphrase_set=kw["paraphrase_set"])
    assert batch.rewards[:5, 0].tolist() == pytest.approx(out.scores[:5]) and batch.missing[5, 0]


def test_ps_grpo_subsampling_is_seeded_and_bounded():
    kw = dict(prompts=["q"] * 6, completions=["a b", "a", "b", "a c", "c", "a b c"], group=[0, 0, 1, 1, 2, 2],
              paraphrase_set=[1] * 6)
    exact = get_reward("ps_grpo")(**kw).scores
    sub = get_reward("ps_grpo", samples=2, seed=4)
    one, two = sub(**kw), sub(**kw)
    assert one.scores == two.scores and one.metrics["compared"] == [2.0] * 6
    assert any(a != b for a, b in zip(one.scores, exact))
    assert get_reward("ps_grpo", samples=10)(**kw).scores == exact  # m >= the other rows: exact
    with pytest.raises(ValueError, match="similarity"):
        get_reward("ps_grpo", similarity="cosine")
    with pytest.raises(ValueError, match="paraphrase_set"):
        get_reward("ps_grpo")(prompts=["q"], completions=["a"], group=[0])


# ------------------------------------------------------------------ consistency
def test_consistency_spec_vector():
    out = get_reward("consistency", stability_weight=1.0, helpfulness_weight=0.0)(
        prompts=["v1", "v2", "v3"], completions=["<answer>A, B</answer>", "<answer>A; C</answer>", "A\nB"],
        variant_set=[0, 0, 0])
    assert out.scores == pytest.approx([0.833333, 0.666667, 0.833333], abs=1e-6)
    assert out.metrics["set_entropy"][0] == pytest.approx(1.011404, abs=1e-6)


def test_consistency_helpfulness_regex_and_empty():
    reward = get_reward("consistency", item_regex=r"\[(\w+)\]", k_target=2)
    out = reward(prompts=["a", "b", "c"], completions=["[x] [y] [z]", "[x]", "nothing"], variant_set=[1, 1, 1])
    # freq x 2/3, y 1/3, z 1/3: stability [4/9, 2/3, 0]; helpfulness [1, 1/2, 0]
    assert out.scores == pytest.approx([0.5 * 4 / 9 + 0.5, 0.5 * 2 / 3 + 0.25, 0.0])
    assert extract_items("<answer>Apple, banana; apple</answer>") == ["apple", "banana"]
    assert set_entropy([[], []]) == 0.0
    with pytest.raises(ValueError, match="item_regex"):
        get_reward("consistency", item_regex="(")


# ------------------------------------------------------------------ entity_match
def test_entity_match_spec_vector():
    ents = ["Ada Lovelace", "London", "1843", "Babbage"]
    completions = ["Ada Lovelace, London, 1843 and Babbage. <answer>Note G</answer>",  # correct, 4
                   "Ada Lovelace in London in 1843 <answer>Note F</answer>",            # wrong, 3
                   "Babbage <answer>x</answer>",                                         # wrong, 1
                   "nothing <answer>y</answer>",                                         # wrong, 0
                   "Babbage and London, no answer tag"]                                  # format error, 2
    out = get_reward("entity_match")(prompts=["q"] * 5, completions=completions, group=[0] * 5,
                                     entities=[ents] * 5, answer=["note g"] * 5)
    assert out.scores == pytest.approx([1.0, 0.225, 0.075, 0.0, 0.0])
    assert out.metrics["entity_rate"] == pytest.approx([1.0, 0.75, 0.25, 0.0, 0.5])


def test_entity_match_normalises_by_the_groups_well_formed_max_and_overlength():
    ents = [["a1", "b2"]] * 4
    completions = ["a1 <answer>no</answer>", "a1 b2 but cut", "nothing <answer>no</answer>", "b2 <answer>no</answer>"]
    out = get_reward("entity_match", alpha=0.5, max_length=8)(
        prompts=["q"] * 4, completions=completions, group=[0, 0, 1, 1], entities=ents, answer=[["yes", "si"]] * 4,
        completion_length=[5, 8, 3, 9])
    # group 0: row 1 is a format error (no tag, and over-length) -> max over row 0 only = 0.5 -> row 0 gets alpha
    # group 1: row 3 is over-length -> max over row 2 = 0 -> 0
    assert out.scores == pytest.approx([0.5, 0.0, 0.0, 0.0])
    assert get_reward("entity_match")(prompts=["q"], completions=["<answer>Si.</answer>"], group=[0], entities=[[]],
                                      answer=[["yes", "si"]]).scores == [1.0]


# ------------------------------------------------------------------ staged
def test_staged_gates_and_skips_later_stages():
    calls = []

    def count(prompts, completions):
        calls.append(list(completions))
        return [float(len(c)) / 10 for c in completions]

    import sys
    import types

    mod = types.ModuleType("_staged_helpers")
    mod.count = count
    sys.modules["_staged_helpers"] = mod
    reward = get_reward("staged", stages=[{"name": "format", "params": {"tags": ["answer"]}},
                                          {"name": "_staged_helpers:count", "gate": 2.0},
                                          {"name": "_staged_helpers:count"}])
    completions = ["<answer>1</answer>", "no tags", "<answer>12345</answer>"]
    out = reward(prompts=["q"] * 3, completions=completions)
    # stage 1 format: [1, 0, 1]; stage 2 only on rows 0 and 2: len / 10 = 1.8 (< gate 2), 2.2; stage 3 only on row 2
    assert out.scores == pytest.approx([1 + 1.8, 0.0, 1 + 2.2 + 2.2])
    assert calls == [[completions[0], completions[2]], [completions[2]]]
    assert out.metrics["stage1/pass_frac"] == [1.0, 0.0, 1.0] and out.metrics["stage2/pass_frac"] == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="at least two"):
        get_reward("staged", stages=[{"name": "format"}])
    with pytest.raises(ValueError, match="stages\\[1\\]"):
        get_reward("staged", stages=[{"name": "format"}, {"name": "format", "weight": 2}])


# ------------------------------------------------------------------ medix
class Embed:
    """Vectors by first letter: same first letter -> cosine 1, else 0."""

    def encode(self, texts):
        return [[1.0 if t[:1].lower() == ch else 0.0 for ch in "abcdefghijklmnopqrstuvwxyz"] + [1e-9] for t in texts]


class YesIfSame:
    kind = "scripted"
    fingerprint = "medix-v1"

    def __init__(self):
        self.asked = 0

    def complete(self, requests):
        from covey.rewards.judge.backends import JudgeReply

        out = []
        for r in requests:
            self.asked += 1
            text = r.messages[-1][1]
            pred = text.split("Predicted:")[1].split("\n")[0]
            gt = text.split("Ground Truth:")[1].split("\n")[0]
            out.append(JudgeReply(text="YES" if pred.lower() == gt.lower() else "NO"))
        return out


@pytest.mark.parametrize(("parts", "overall"), [((1, 1, 1, 1), 1.0), ((1, 1, 0, 0), 0.6175), ((1, 0, 1, 0), 0.4375),
                                                 ((0, 1, 1, 1), 0.9), ((0, 0, 0, 0), 0.0)])
def test_medix_composite_spec_vectors(parts, overall):
    fmt, llm, emb, mod = parts
    head = "<MRI>" if mod else "<CT>"
    body = "<thinking>t</thinking> <answer>{}</answer>" if fmt else "<thinking>t</thinking>junk<answer>{}</answer>"
    if llm and emb:
        given = "Glioma"  # judge YES (case-insensitive) and same first letter
    elif llm:
        given = "glioma"  # pretend: judge YES, embedding differs -> use a different first letter below
    elif emb:
        given = "Gxx"
    else:
        given = "Meningioma"
    backend = YesIfSame()
    reward = get_reward("medix", backend=backend, embedder=Embed())
    gt = "<mri>GLIOMA"
    if llm and not emb:
        class E2(Embed):
            def encode(self, texts):
                return [[1.0, 0.0], [0.0, 1.0]] * (len(texts) // 2)
        reward.embedder = E2()
    out = reward(prompts=["q"], completions=[head + " " + body.format(given)], answer=[gt])
    assert out.scores[0] == pytest.approx(overall)
    assert (out.metrics["format"], out.metrics["accuracy_llm"], out.metrics["accuracy_embed"], out.metrics["modality"]) == (
        [float(fmt)], [float(llm)], [float(emb)], [float(mod)])


def test_medix_exact_match_and_invalid_answers_skip_the_judge():
    backend = YesIfSame()
    reward = get_reward("medix", backend=backend, embedder=Embed())
    out = reward(prompts=["q"] * 4, completions=["<answer>glioma.</answer>", "<answer>a:b</answer>", "<answer>x</answer>",
                                                 "<answer>glioma</answer>"], answer=["<ct>glioma", "<ct>glioma", "<ct>x", "no tag"])
    assert backend.asked == 0
    assert out.metrics["accuracy_llm"] == [1.0, 0.0, 0.0, 0.0] and out.metrics["accuracy_embed"] == [1.0, 0.0, 0.0, 0.0]
    assert medix_parts("<CT><thinking>a</thinking> <answer> b </answer>", "<ct>b")["format"] == 1.0
    with pytest.raises(ValueError, match="embedder"):
        get_reward("medix", backend=backend)
    with pytest.raises(ValueError, match="sentence-transformers"):
        get_reward("medix", backend=backend, embedder={"model": "abhinand/MedEmbed-large-v0.1"})
    assert not math.isnan(out.scores[0])


# ------------------------------------------------------------------ switch
def test_switch_dispatches_by_kind_and_forwards_the_engine():
    reward = get_reward("switch", cases={"verifiable": {"name": "math"},
                                         "open": {"name": "format", "params": {"tags": ["answer"]}}})
    out = reward(prompts=["q"] * 4, completions=["\\boxed{4}", "<answer>x</answer>", "\\boxed{5}", "plain"],
                 kind=["verifiable", "open", "verifiable", "preference"], answer=["4", None, "4", None])
    assert out.scores == [1.0, 1.0, 0.0, None]  # no case for "preference": does not apply
    assert out.metrics["verifiable/mean"] == [1.0, 0.0] and out.metrics["open/mean"] == [1.0]
    assert not reward.needs_engine and not reward.in_process
    zero = get_reward("switch", cases={"open": {"name": "format"}}, default=0.0)
    assert zero(prompts=["q"], completions=["x"], kind=["other"]).scores == [0.0]
    policy = get_reward("switch", cases={"open": {"name": "judge", "params": {"backend": {"kind": "policy"},
                                                                             "template": "Is {completion} good?"}}})
    assert policy.needs_engine and policy.in_process
    seen = {}
    policy.cases["open"][0].judge.backend.set_context = lambda **kw: seen.update(kw)
    policy.set_context(engine="E", tokenizer="T", policy_version=7)
    assert seen == {"engine": "E", "tokenizer": "T", "policy_version": 7}
    staged = get_reward("staged", stages=[{"name": "format"}, {"name": "judge", "params": {"backend": {"kind": "policy"},
                                                                                           "template": "Is {completion} good?"}}])
    assert staged.needs_engine and staged.in_process
    with pytest.raises(ValueError, match="kind"):
        reward(prompts=["q"], completions=["x"])
    with pytest.raises(ValueError, match="default"):
        get_reward("switch", cases={"open": {"name": "format"}}, default="skip")
