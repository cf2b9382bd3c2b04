import numpy as np
import pytest

from covey.tasks import CausalSCM, get_task
from covey.tasks.causal import SCM, ancestor_size, causal_reward, parse_answer, query_distribution, sample_scm, tvd

# X0 -> X1, binary: P(X0) = [0.3, 0.7]; P(X1 | X0=0) = [0.9, 0.1]; P(X1 | X0=1) = [0.2, 0.8]
TWO = SCM([2, 2], [[], [0]], [np.array([0.3, 0.7]), np.array([[0.9, 0.1], [0.2, 0.8]])])


@pytest.mark.parametrize("text, truth, expected", [
    ("ANSWER [0.1, 0.9]", [0.2, 0.8], (0.92, 0.2)),            # the spec's vectors (score_strict.py)
    ("THOUGHT PROCESS ... ANSWER [0.2, 0.8]", [0.2, 0.8], (1.0, 1.0)),
    ("ANSWER [0.5, 0.5, 0.0]", [0.2, 0.8], (0.1, 0.1)),
    ("the answer is 0.2", [0.2, 0.8], (0.0, 0.0)),
    ("ANSWER [0.995, 0.005]", [1.0, 0.0], (0.996, 1.0)),
    ("ANSWER [1.0, 0.0]", [0.0, 1.0], (0.2, 0.2)),               # TVD 1: only the format and length parts
    ("ANSWER [3.0, 0.0]", [0.0, 1.0], (0.2, 0.2)),               # TVD 2 is clipped at max(1 - TVD, 0)
])
def test_reward_and_score_match_score_strict(text, truth, expected):
    reward, score = causal_reward(text, truth)
    assert reward == pytest.approx(expected[0]) and score == pytest.approx(expected[1])


def test_parse_answer_follows_the_released_regex():
    assert parse_answer("ANSWER[0.5, 0.5]") == [0.5, 0.5]         # \s* after ANSWER
    assert parse_answer("ANSWER [0.25,0.75]") is None             # the list needs ", " between numbers
    assert parse_answer("ANSWER [1.2.3, 0.5]") is None            # float() fails -> no answer
    assert parse_answer("ANSWER [-0.1, 1.1] then ANSWER [0.5, 0.5]") == [-0.1, 1.1]  # the first match
    assert parse_answer("answer [0.5, 0.5]") is None              # case-sensitive
    assert tvd([0.5, 0.5], [0.2, 0.8]) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        tvd([1.0], [0.5, 0.5])


def test_observational_and_interventional_by_hand():
    # P(X0 | X1=1) = [0.3*0.1, 0.7*0.8] / 0.59
    assert query_distribution(TWO, "observational", 0, observed=(1, 1)) == pytest.approx([0.03 / 0.59, 0.56 / 0.59])
    assert query_distribution(TWO, "observational", 1, observed=(1, 0)) == pytest.approx([1.0, 0.0])
    # do(X0=0): X1 follows row 0; do(X1=1) leaves the parent X0 at its prior
    assert query_distribution(TWO, "interventional", 1, intervened=(0, 0)) == pytest.approx([0.9, 0.1])
    assert query_distribution(TWO, "interventional", 0, intervened=(1, 1)) == pytest.approx([0.3, 0.7])
    with pytest.raises(ValueError, match="unknown level"):
        query_distribution(TWO, "causal", 0)


def test_counterfactual_twin_network_by_hand():
    # saw X1 = 1; had X0 been 0, what would X1 be? Posterior of X0 is [0.03, 0.56] / 0.59; where X0 was
    # already 0 the shared response function repeats X1 = 1, elsewhere X1' follows row 0 (P(1) = 0.1)
    p1 = 0.03 / 0.59 + 0.56 / 0.59 * 0.1
    assert query_distribution(TWO, "counterfactual", 1, observed=(1, 1), intervened=(0, 0)) == pytest.approx([1 - p1, p1])
    # saw X0 = 1, set X0 := 0: X1' follows row 0 alone, X0' is the set value
    assert query_distribution(TWO, "counterfactual", 1, observed=(0, 1), intervened=(0, 0)) == pytest.approx([0.9, 0.1])
    assert query_distribution(TWO, "counterfactual", 0, observed=(0, 1), intervened=(0, 0)) == pytest.approx([1.0, 0.0])
    # saw X1 = 1, set X0 := 1: where X0 was 1 X1' repeats 1, where it was 0 X1' follows row 1 (P(1) = 0.8)
    assert query_distribution(TWO, "counterfactual", 1, observed=(1, 1), intervened=(0, 1)) == pytest.approx(
        [0.03 / 0.59 * 0.2, 0.56 / 0.59 + 0.03 / 0.59 * 0.8])


def test_ancestor_size_counts_the_relevant_subgraph():
    assert ancestor_size(TWO, "observational", 0, observed=(1, 0)) == 2
    assert ancestor_size(TWO, "observational", 1, observed=(1, 0)) == 1          # query = observation
    assert ancestor_size(TWO, "interventional", 1, intervened=(0, 0)) == 2
    assert ancestor_size(TWO, "interventional", 0, intervened=(0, 1)) == 1
    # twin network: x'1, x'0 (cut), r1 ; x1, x0, r0 -> 6 nodes (rlcausal counts the same graph)
    assert ancestor_size(TWO, "counterfactual", 1, observed=(1, 1), intervened=(0, 0)) == 6
    # x'1 and x'0 with r1, plus the observation x0 and r0 -> 5
    assert ancestor_size(TWO, "counterfactual", 1, observed=(0, 1), intervened=(0, 0)) == 5


def test_sampled_models_follow_the_released_sampler():
    rng = np.random.default_rng(0)
    for _ in range(50):
        scm = sample_scm(rng, 5, 2)
        assert scm.parents[0] == [] and any(scm.parents)         # at least one root, and 1 .. n-1 roots
        n_roots = sum(not p for p in scm.parents)
        assert 1 <= n_roots <= 4 and all(not p for p in scm.parents[:n_roots])
        for j, pa in enumerate(scm.parents[n_roots:], start=n_roots):
            assert 1 <= len(pa) <= 2 and all(p < j for p in pa)
        for cpt, pa in zip(scm.cpts, scm.parents):
            assert cpt.shape == (2,) * len(pa) + (2,) and np.allclose(cpt.sum(-1), 1.0)


def test_generated_items_are_reproducible_and_cycle_levels():
    task = CausalSCM(n_train=12, n_test=9, questions_per_model=4)
    test = task.examples("test")
    assert [x["level"] for x in test[:3]] == ["observational", "interventional", "counterfactual"]
    assert test == CausalSCM(n_train=50, n_test=9, questions_per_model=4).examples("test")   # test ignores n_train
    assert test != task.examples("train")[:9]
    for item in test:
        assert sum(item["reference"]) == pytest.approx(1.0, abs=0.011) and len(item["reference"]) == 2
        assert item["answer"] == str(item["reference"]) and item["ancestor_size"] >= 1
        assert task.reward([item["prompt"]], [task.demonstration(item)], reference=[item["reference"]]) == [1.0]
    assert CausalSCM(levels=["counterfactual"], n_train=0, n_test=3).examples("test")[2]["level"] == "counterfactual"


def test_prompt_lists_the_model_and_the_question():
    item = CausalSCM(n_train=0, n_test=1, chat=True, levels="interventional").examples("test")[0]
    system, user = item["prompt"]
    assert system["role"] == "system" and "ANSWER" in system["content"]
    assert "strict digraph" in user["content"] and "CPTs for v" in user["content"]
    assert "given we intervented to set" in user["content"]
    plain = CausalSCM(n_train=0, n_test=1, chat=False).examples("test")[0]["prompt"]
    assert plain.startswith("You are an expert") and "Question: What is the marginal distribution" in plain


def test_trains_on_the_strict_score_by_default_as_the_released_launcher():
    # train_rlvr.sh: reward_manager=dapo, which takes score_strict.compute_score(...)["score"]
    task = get_task("causal", n_train=0, n_test=1)
    assert task.metric == "score"
    assert task.reward(["p"] * 3, ["ANSWER [0.1, 0.9]", "ANSWER [0.2, 0.8]", "x"], reference=[[0.2, 0.8]] * 3) == [0.2, 1.0, 0.0]
    dense = get_task("causal", n_train=0, n_test=1, metric="reward")  # covey's earlier default
    assert dense.reward(["p"], ["ANSWER [0.1, 0.9]"], reference=[[0.2, 0.8]]) == [0.92]


def test_compact_prompt_fits_the_tiny_models():
    from covey.models import apply_chat, build_tiny

    tok = build_tiny("tiny-llama")[1]
    released = CausalSCM(n_train=40, n_test=0).examples("train")
    compact = CausalSCM(n_train=40, n_test=0, prompt="compact").examples("train")
    assert min(len(apply_chat(tok, it["prompt"])) for it in released) > 1024  # over tiny-llama's positions
    assert max(len(apply_chat(tok, it["prompt"])) for it in compact) < 1024 - 256
    # the same models, questions and answers: only the text differs
    assert [(a["reference"], a["level"]) for a in released] == [(b["reference"], b["level"]) for b in compact]
    user = compact[1]["prompt"][1]["content"]
    assert "Edges: " in user and "P(v" in user and "given we intervented to set" in user and "strict digraph" not in user


def test_score_metric_and_bad_params():
    task = get_task("causal", n_train=0, n_test=1, metric="score")
    assert task.reward(["p"] * 3, ["ANSWER [0.1, 0.9]", "ANSWER [0.2, 0.8]", "x"], reference=[[0.2, 0.8]] * 3) == [0.2, 1.0, 0.0]
    assert task.extract_answer("ANSWER [0.2, 0.8]") == "[0.2, 0.8]" and task.extract_answer("none") is None
    for bad in ({"levels": ["causal"]}, {"levels": []}, {"n_vars": 1}, {"n_vals": 5}, {"metric": "tvd"}, {"prompt": "short"},
                {"questions_per_model": 0}, {"n_vars": 8, "n_vals": 3}):
        with pytest.raises(ValueError):
            CausalSCM(**bad)
