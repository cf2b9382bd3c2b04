"""`seele_provisional` (SEELE, arXiv 2509.06923, reconstructed): the 3PL fit of the hint ratio by hand and a
scripted engine through three rounds (hint prefixes, one group per problem, the ratio carried to the next step)."""

import dataclasses
import math

import pytest

from covey.engine.base import SamplingParams
from covey.samplers.base import Draw
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.strategies.seele import fit_difficulty, next_ratio, round_sizes
from tests.strategies._fake_engine import CharTok, ScriptedEngine, exact_score

B1 = -math.log(0.1 / 0.9) / 10  # 0 of 4 at h = 0: acc (0 + 0.5) / 5 = 0.1 -> b = 0 - logit(0.1) / 10 = 0.21972


def test_fit_by_hand():
    assert fit_difficulty([(0.0, 0, 4)], guess=0.0, discrimination=10) == pytest.approx(B1)
    # + 3 of 4 at h = B1: acc 0.7 -> B1 - logit(0.7) / 10; equal weights -> the mean
    b2 = B1 - math.log(0.7 / 0.3) / 10
    assert fit_difficulty([(0.0, 0, 4), (B1, 3, 4)], guess=0.0, discrimination=10) == pytest.approx((B1 + b2) / 2)
    assert fit_difficulty([(0.0, 0, 1), (B1, 3, 4)], guess=0.0, discrimination=10) == pytest.approx(
        (1 * (0 - math.log((0.5 / 2) / (1 - 0.5 / 2)) / 10) + 4 * b2) / 5)  # weighted by trials
    with pytest.raises(ValueError, match="at least one round"):
        fit_difficulty([], guess=0.0, discrimination=10)


def test_a_round_at_the_target_keeps_its_ratio_and_the_ratio_is_clipped():
    # guess 0.25: 2 of 4 at h 0.5 -> acc 0.5 -> q = (0.5 - 0.25) / 0.75 = 1/3 -> b = 0.5 + ln(2) / 10; target 0.5 -> back to 0.5
    b = fit_difficulty([(0.5, 2, 4)], guess=0.25, discrimination=10)
    assert b == pytest.approx(0.5 + math.log(2) / 10)
    assert next_ratio(b, target=0.5, guess=0.25, discrimination=10) == pytest.approx(0.5)
    assert next_ratio(-3.0, target=0.5, guess=0.0, discrimination=10) == 0.0
    assert next_ratio(3.0, target=0.5, guess=0.0, discrimination=10) == 1.0


def test_round_sizes():
    assert round_sizes(8, 3) == [3, 3, 2] and round_sizes(3, 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="group_size >= rounds"):
        round_sizes(2, 3)


def rule(prompt, k):
    """Correct ('ok') when the hint holds at least 3 characters of the solution 'abcdefghij'."""
    hint = prompt.split("\n\n")[1] if "\n\n" in prompt else ""
    return "ok" if len(hint) >= 3 else "no"


def _ctx(engine):
    sp = SamplingParams(max_new_tokens=8, seed=0)
    item = {"id": 4, "prompt": "Q", "answer": "ok", "solution": "abcdefghij"}
    return RolloutContext(engine=engine, tokenizer=CharTok(), draws=[Draw(item=item, n=9)],
                          sampling=lambda r: dataclasses.replace(sp, seed=r), score=exact_score, draw=lambda k: [])  # fmt: skip


def test_three_rounds_grow_the_hint_until_the_problem_is_solvable():
    strat = STRATEGIES.build("seele_provisional", {"rounds": 3})
    engine = ScriptedEngine(rule)
    batch, m = strat.rollout([], _ctx(engine))
    # 3 rows a round. round 0: h 0, no hint, 0 of 3 -> acc 0.5 / 4 -> b = -logit(0.125) / 10 = 0.19459;
    # round 1: h 0.19459 -> round(1.95) = 2 chars "ab", 0 of 3 -> b = mean(0.19459, 2 x 0.19459) = 0.29189;
    # round 2: 2.92 -> 3 chars "abc", 3 of 3
    b = -math.log(0.125 / 0.875) / 10
    assert engine.prompts_seen == ["Q", "Q\n\nab", "Q\n\nabc"]
    assert [m[f"seele/round{r}_ratio"] for r in range(3)] == pytest.approx([0.0, b, 1.5 * b])
    assert [m[f"seele/round{r}_acc"] for r in range(3)] == [0.0, 0.0, 1.0]
    assert batch.group.tolist() == [0] * 9 and batch.rewards[:, 0].tolist() == [0.0] * 6 + [1.0] * 3
    assert all(it["prompt"] == "Q" for it in batch.items)  # rewards and the item keep the original problem
    # the next step starts where this one ended; the state survives a checkpoint
    again = STRATEGIES.build("seele_provisional", {"rounds": 1})
    again.load_state_dict(strat.state_dict())
    engine2 = ScriptedEngine(rule)
    again.rollout([], _ctx(engine2))
    assert engine2.prompts_seen == ["Q\n\nabc"]


def test_bad_parameters():
    with pytest.raises(ValueError, match="guess < target"):
        STRATEGIES.build("seele_provisional", {"guess": 0.6})
    with pytest.raises(ValueError, match="solution_column"):
        STRATEGIES.build("seele_provisional", {"solution_column": "nope"}).rollout([], _ctx(ScriptedEngine(rule)))
