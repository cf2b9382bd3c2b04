"""writing_zero: the pairwise GenRM margin against the spec's vectors, and end to end with the `brpo`
advantage on one shared reference row (scripted judge; a runner cutting groups into chunks)."""

import json
import math
import re

import pytest
import torch

from covey.algos import ADVANTAGES
from covey.algos.advantages.brpo import reference_rows
from covey.rewards import RewardRunner, get_reward
from covey.rewards.judge.backends import JudgeReply
from covey.rewards.judge.writing_zero import pair_margin
from covey.rollouts import Rollouts


@pytest.mark.parametrize(("o1", "o2", "m"), [((6, 4), (4, 6), 2.0), ((3, 7), (6, 4), -3.0),
                                             ((5, 5), (6, 4), -1.0), ((5, 5), (5, 5), 0.0)])
def test_pair_margin_spec_vectors(o1, o2, m):
    # hand-checked (Writing-Zero): order 1 = (s_i, s_ref), order 2 = (s_ref', s_i')
    assert pair_margin(o1, o2) == m


def test_reference_rows_one_per_group_and_seeded():
    group = [4, 4, 4, 9, 9, 2]
    ids = [[1], [2], [3], [1], [1], [7]]
    refs = reference_rows(group, ids, 0)
    assert [sum(r for r, g in zip(refs, group) if g == k) for k in (4, 9, 2)] == [1, 1, 1]
    assert refs[5]  # a group of one is its own reference
    # the draw of a group depends on that group's rows only: a chunk holding one group agrees with the batch
    assert reference_rows(group[:3], ids[:3], 0) == refs[:3]
    assert len({tuple(reference_rows(group, ids, s)) for s in range(30)}) > 1
    # identical completions at different positions still get a uniform draw (position is in the key)
    firsts = [reference_rows([0, 0], [[5], [5]], s).index(True) for s in range(200)]
    assert 60 < sum(firsts) < 140


class PairJudge:
    """Completions are numbers (qualities); the reply splits 10 points in proportion, plus `bias_a` for
    whichever answer is shown first; a completion "bad" makes the reply unreadable."""

    kind = "scripted"
    fingerprint = "wz-v1"

    def __init__(self, bias_a=0.0):
        self.bias_a, self.requests = bias_a, []

    def complete(self, requests):
        self.requests.extend(requests)
        out = []
        for r in requests:
            user = r.messages[-1][1]
            a = re.search(r"<Answer_A>\n(.*?)\n</Answer_A>", user, re.S).group(1)
            b = re.search(r"<Answer_B>\n(.*?)\n</Answer_B>", user, re.S).group(1)
            if "bad" in (a, b):
                out.append(JudgeReply(text="no idea"))
                continue
            qa, qb = float(a), float(b)
            sa = 10 * qa / (qa + qb) + self.bias_a
            body = {"combined_scores": {"Agent_A": sa, "Agent_B": 10 - sa}}
            out.append(JudgeReply(text=f"critique...\n{json.dumps(body)}"))
        return out


def test_writing_zero_scores_against_the_reference_and_brpo_agrees():
    texts = ["1", "3", "2", "4", "6", "2", "5"]
    group = [0, 0, 0, 0, 1, 1, 1]  # unequal groups
    ids = [[10 + i, i] for i in range(len(texts))]
    refs = reference_rows(group, ids, 3)
    backend = PairJudge(bias_a=1.0)
    runner = RewardRunner([{"name": "writing_zero", "params": {"backend": backend, "reference_seed": 3, "parse_retries": 0}}],
                          workers=0, chunk_size=1)  # one group per call
    out = runner(["q"] * 7, texts, group=group, completion_ids=ids)
    r = out.rewards[:, 0].tolist()
    q = [float(t) for t in texts]
    for i, g in enumerate(group):
        ref = next(j for j in range(7) if refs[j] and group[j] == g)
        if i == ref:
            assert r[i] == 0.0
        else:  # the Agent_A bias cancels over the two orders: m = 10 (q_i - q_ref) / (q_i + q_ref)
            assert r[i] == pytest.approx(10 * (q[i] - q[ref]) / (q[i] + q[ref]), abs=1e-5)
    assert len(backend.requests) == 2 * (7 - 2)  # both orders, every row but the two references
    assert all(r.messages[0][0] == "system" and "10 points" in r.messages[0][1] for r in backend.requests)
    # brpo with compare=sign: the same reference row (masked), A = the verdict sign(m)
    batch = Rollouts(prompt_ids=[torch.tensor([1]) for _ in texts], completion_ids=torch.tensor(ids),
                     completion_mask=torch.ones(7, 2), behaviour_logprobs=torch.zeros(7, 2),
                     group=torch.tensor(group), prompt_id=torch.tensor(group))
    out.apply_to(batch)
    res = ADVANTAGES["brpo"].bind({"seed": 3, "compare": "sign"})(batch)
    assert res.sample_mask.tolist() == [0.0 if x else 1.0 for x in refs]
    assert res.advantages.tolist() == [0.0 if refs[i] else math.copysign(1.0, r[i]) if r[i] else 0.0 for i in range(7)]


def test_writing_zero_sign_ties_failures_and_metrics():
    group, ids = [0, 0, 0], [[1], [2], [3]]
    refs = reference_rows(group, ids, 0)
    ref = refs.index(True)
    texts = ["2", "2", "2"]
    texts[(ref + 1) % 3] = "bad"  # one row's both orders fail to parse
    reward = get_reward("writing_zero", backend=PairJudge(), score="sign", parse_retries=0)
    out = reward(prompts=["q"] * 3, completions=texts, group=group, completion_ids=ids)
    assert out.scores == [0.0, 0.0, 0.0]  # equal qualities tie; the failed row is a (5, 5) tie on both orders
    assert out.metrics["tie_frac"] == [1.0, 1.0] and out.metrics["parse_fail_frac"].count(1.0) == 2
    strict = get_reward("writing_zero", backend=PairJudge(), on_fail="none", parse_retries=0)
    out = strict(prompts=["q"] * 3, completions=texts, group=group, completion_ids=ids)
    assert math.isnan(out.scores[(ref + 1) % 3]) and out.scores[ref] == 0.0 and out.scores[(ref + 2) % 3] == 0.0


def test_writing_zero_position_flip_metric():
    class AlwaysA(PairJudge):
        def complete(self, requests):
            return [JudgeReply(text='{"combined_scores": {"Agent_A": 7, "Agent_B": 3}}') for _ in requests]

    out = get_reward("writing_zero", backend=AlwaysA())(prompts=["q"] * 2, completions=["x", "y"], group=[0, 0],
                                                      completion_ids=[[1], [2]])
    assert out.scores == [0.0, 0.0] and out.metrics["position_flip_frac"] == [1.0]  # pure position bias: m = 0


def test_writing_zero_config_errors():
    with pytest.raises(ValueError, match="score"):
        get_reward("writing_zero", backend=PairJudge(), score="prob")
    with pytest.raises(ValueError, match=r"\{a\} and \{b\}"):
        get_reward("writing_zero", backend=PairJudge(), template="yes_no_match")
    with pytest.raises(ValueError, match="json_pair"):
        get_reward("writing_zero", backend=PairJudge(), parser="yes_no")
    with pytest.raises(ValueError, match="completion_ids"):
        get_reward("writing_zero", backend=PairJudge())(prompts=["q"], completions=["1"], group=[0])


def test_config_check_pairs_writing_zero_with_brpo_and_its_seed():
    from pathlib import Path

    import yaml

    from covey.train.config import load_config, validate_config
    from covey.train.setup import check_run

    example = Path(__file__).resolve().parents[2] / "examples" / "judge" / "pairwise_genrm.yaml"
    check_run(load_config(example))  # the example passes
    with pytest.raises(ValueError, match="reference_seed=0 but brpo's seed=3"):
        check_run(load_config(example, ["algo.advantage.seed=3"]))
    raw = yaml.safe_load(example.read_text())
    raw["algo"]["advantage"] = {"name": "grpo"}
    with pytest.raises(ValueError, match="set algo.advantage"):
        check_run(validate_config(raw))
