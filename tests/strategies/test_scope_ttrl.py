"""`scope_ttrl` (SCOPE, arXiv 2512.15146): confidences, the confidence-weighted vote, subgroups, the Pareto
choice, by hand; a crafted batch through the strategy (labels in the items, the truth kept for the audit)."""

import random

import pytest
import torch

import covey.strategies.scope_ttrl as st
from covey.rewards.math import extract_answer, math_equal
from covey.rollouts import Rollouts
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext, engine_protocols
from covey.engine.base import Engine, ScoringEngine


def test_steps_end_after_tokens_holding_a_blank_line():
    assert st.split_steps(["a", "\n\nb", "c", "d\n\n"]) == [(0, 2), (2, 4)]
    assert st.split_steps(["a", "b"]) == [(0, 2)] and st.split_steps([]) == []


def test_response_confidence_is_the_mean_of_step_means():
    # token conf [0.5, 1.0, 2.0, 0.25]; steps (0,2) -> 0.75, (2,4) -> 1.125; C = 0.9375
    assert st.response_confidence(torch.tensor([-0.5, -1.0, -2.0, -0.25]), [(0, 2), (2, 4)]) == pytest.approx(0.9375)
    # top-k form: c_t = -mean over the k best; rounded to 3 decimals: -mean(-0.1, -3.0) = 1.55, -mean(-1/3, -1/3) = 0.333
    top = torch.tensor([[-0.1, -3.0], [-1 / 3, -1 / 3]])
    assert st.response_confidence(top, [(0, 2)]) == pytest.approx((1.55 + 0.333) / 2)
    assert st.response_confidence(torch.zeros(0), []) == 0.0


def test_vote_sums_confidence_per_normalised_answer():
    assert st.confidence_vote(["4", "5", None, "$4"], [0.3, 0.5, 9.0, 0.3]) == "4"  # 0.6 beats 0.5; None does not vote
    assert st.confidence_vote(["5", "4"], [0.5, 0.5]) == "5"  # a tie: the first answer seen
    assert st.confidence_vote([None, None], [1.0, 1.0]) == "None"


def test_subgroups_are_contiguous_and_each_votes_on_its_own_draw():
    answers, conf = ["1", "1", "2", "2"], [0.1, 0.1, 0.9, 0.9]
    assert st.subgroup_labels(answers, conf, 4, 4, random.Random(0)) == ["2"] * 4  # one subgroup, every row votes
    twin = random.Random(5)
    voters = [twin.sample(range(4), 1)[0], twin.sample(range(4), 1)[0]]  # the draws the strategy's rng makes
    labels = st.subgroup_labels(answers, conf, 2, 1, random.Random(5))  # two subgroups of 2, one voter each
    assert labels == [answers[voters[0]]] * 2 + [answers[voters[1]]] * 2
    with pytest.raises(ValueError, match="subgroups of 3"):
        st.subgroup_labels(answers, conf, 3, 2, random.Random(0))


def test_pareto_choice_by_hand():
    # (8) is dominated by (4); front 1, 2, 4: r in [0.5, 0.7], d in [2, 4]
    # s1: (0, 1) -> sqrt(0.7) = 0.837; s2: (0.5, 0.5) -> 0.5; s4: (1, 0) -> sqrt(0.3) = 0.548
    cands = [(1, 0.5, 4.0), (2, 0.6, 3.0), (4, 0.7, 2.0), (8, 0.6, 1.0)]
    assert st.pareto_choice(cands, 0.7) == 2
    assert st.pareto_choice(cands, 1.0) == 4  # only the reward rate counts
    assert st.pareto_choice(cands, 0.0) == 1  # only the diversity counts
    assert st.pareto_choice([(1, 0.5, 1.0)], 0.7) == 1


def test_top_k_asks_for_a_scoring_engine():
    assert engine_protocols("scope_ttrl", {}) == (Engine,)
    assert engine_protocols("scope_ttrl", {"top_k": 5}) == (ScoringEngine,)
    with pytest.raises(ValueError, match="order holds unknown modes"):
        STRATEGIES.build("scope_ttrl", {"order": ["nope"]})


# ------------------------------------------------------------------ through the strategy, with a crafted batch
class Tok:
    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]

    def batch_decode(self, rows, skip_special_tokens=True):
        return [" ".join(str(i) for i in r) for r in rows]


def _batch(texts_ids, gold):
    n, t = len(texts_ids), max(len(x) for x in texts_ids)
    ids = torch.zeros(n, t, dtype=torch.long)
    mask = torch.zeros(n, t)
    for i, x in enumerate(texts_ids):
        ids[i, : len(x)], mask[i, : len(x)] = torch.tensor(x), 1.0
    item = {"id": 0, "prompt": "q", "answer": gold}
    return Rollouts(prompt_ids=[torch.tensor([1])] * n, completion_ids=ids, completion_mask=mask,
                    behaviour_logprobs=-0.5 * mask, group=torch.zeros(n, dtype=torch.long),
                    prompt_id=torch.zeros(n, dtype=torch.long), items=[item] * n)  # fmt: skip


def _score(batch):
    texts = Tok().batch_decode([r[: int(m.sum())].tolist() for r, m in zip(batch.completion_ids, batch.completion_mask)])
    vals = [float(math_equal(extract_answer(t, order=["last_number"]), it["answer"])) for t, it in zip(texts, batch.items)]
    batch.rewards, batch.reward_names = torch.tensor(vals)[:, None], ("accuracy",)
    return {}


def _run(monkeypatch, rows, gold, **params):
    monkeypatch.setattr(st, "sample_groups", lambda *a: _batch(rows, gold))
    strat = STRATEGIES.build("scope_ttrl", {"order": ["last_number"], **params})
    ctx = RolloutContext(engine=object(), tokenizer=Tok(), draws=[], sampling=lambda r: type("S", (), {"seed": 3})(),
                         score=_score, draw=lambda k: [])  # fmt: skip
    return strat.rollout([], ctx)


def test_labels_go_into_the_items_and_the_truth_stays_for_the_audit(monkeypatch):
    batch, m = _run(monkeypatch, [[7], [7], [7], [9]], "9", sizes=[4], votes=4)  # one subgroup: "7" wins 3 to 1
    assert [it["answer"] for it in batch.items] == ["7"] * 4 and [it["gold_answer"] for it in batch.items] == ["9"] * 4
    assert batch.rewards[:, 0].tolist() == [1.0, 1.0, 1.0, 0.0]  # scored against the pseudo-label
    assert m["scope/subgroup_size"] == 4 and m["scope/label_accuracy"] == 0.0
    assert m["scope/reward_accuracy"] == 0.0  # every pseudo reward is the opposite of the true one


def test_one_answer_everywhere_earns_full_pseudo_reward_and_only_the_audit_shows_it(monkeypatch):
    batch, m = _run(monkeypatch, [[5]] * 4, "6")
    assert batch.rewards[:, 0].tolist() == [1.0] * 4
    assert m["scope/label_accuracy"] == 0.0 and m["scope/reward_rate"] == 1.0 and m["scope/diversity"] == 1.0
