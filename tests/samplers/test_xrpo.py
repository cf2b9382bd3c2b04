import math

import pytest
import torch

from covey.samplers._sampling import t_quantile
from covey.samplers.xrpo import XRPOSampler, allocate_rollouts, ci_half_width, jaccard, rollout_priority, shrunk_std
from tests.samplers._helpers import ids, one_step, reload, scored

T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 7: 2.3646, 30: 2.0423}  # Student-t table, two-sided 95%


def test_t_quantile_matches_the_table():
    for df, t in T975.items():
        assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)


def test_ci_half_width_by_hand():
    assert ci_half_width(4, 0.5, 0.05) == pytest.approx(3.1824 * 0.5 / 2, abs=1e-4)
    assert ci_half_width(1, 0.5, 0.05) == math.inf and ci_half_width(5, 0.0, 0.05) == 0.0


def test_shrink_largest_for_small_n_and_large_s():
    dh = lambda n, s: ci_half_width(n, s, 0.05) - ci_half_width(n + 1, s, 0.05)  # noqa: E731
    assert dh(2, 0.5) > dh(3, 0.5) > dh(8, 0.5) > 0
    assert dh(3, 0.5) > dh(3, 0.2) > dh(3, 0.0) == 0


def test_shrunk_std_by_hand():
    # rewards [1, 1, 0, 0]: SS = 1; (1 + 1 * 0.25) / (3 + 1) = 0.3125
    assert shrunk_std(4, 1.0, 0.5, 1.0) == pytest.approx(math.sqrt(0.3125))
    assert shrunk_std(0, 0.0, 0.5, 1.0) == 0.5  # unseen: the prior
    assert shrunk_std(8, 0.0, 0.5, 1.0) == pytest.approx(math.sqrt(0.25 / 8))  # all equal: shrunk, not 0


def test_allocation_by_hand():
    # stds (0.5, 0.1), n0 2, bonus 0. dh(2, .5) = 12.7062*.5/sqrt2 - 4.3027*.5/sqrt3 = 3.250 -> prompt 0;
    # then dh(2, .1) = 0.650 > dh(3, .5) = 0.447 -> prompt 1; then dh(3, .5) = 0.447 > dh(3, .1) = 0.089 -> prompt 0
    assert allocate_rollouts([0.5, 0.1], 5, 2, 8, 0.05, 0.0) == [3, 2]
    assert allocate_rollouts([0.5, 0.1], 6, 2, 8, 0.05, 0.0) == [3, 3]
    assert allocate_rollouts([0.5, 0.1], 7, 2, 8, 0.05, 0.0) == [4, 3]
    # a prompt at the cap gets nothing more, whatever its priority
    assert allocate_rollouts([0.5, 0.0], 8, 2, 4, 0.05, 0.0) == [4, 4]
    with pytest.raises(ValueError, match="cannot share"):
        allocate_rollouts([0.5, 0.5], 10, 2, 4, 0.05, 0.0)


def test_priority_with_the_exploration_bonus_by_hand():
    # n 2, s 0.5, T 8, bonus 0.1: dh = 12.70620*.5/sqrt2 - 4.30265*.5/sqrt3 = 4.492398 - 1.242145 = 3.250253;
    # bonus term 0.1 * sqrt(ln 8 / 2) = 0.1 * 1.019667 = 0.101967 -> 3.352220
    dh = 12.7062 * 0.5 / math.sqrt(2) - 4.3027 * 0.5 / math.sqrt(3)
    assert rollout_priority(2, 0.5, 8, 0.05, 0.1) == pytest.approx(dh + 0.1 * math.sqrt(math.log(8) / 2), abs=1e-4)
    assert rollout_priority(2, 0.5, 8, 0.05, 0.1) == pytest.approx(3.352220, abs=1e-5)
    # s = 0: no CI shrink, only the bonus; T below 2 counts as 2
    assert rollout_priority(4, 0.0, 20, 0.05, 0.3) == pytest.approx(0.3 * math.sqrt(math.log(20) / 4))
    assert rollout_priority(2, 0.0, 1, 0.05, 1.0) == pytest.approx(math.sqrt(math.log(2) / 2))


def test_the_bonus_steers_the_allocation_toward_less_sampled_prompts():
    # equal stds 0: dh = 0 everywhere, so without the bonus every extra rollout goes to the first prompt
    assert allocate_rollouts([0.0, 0.0], 6, 2, 8, 0.05, 0.0) == [4, 2]
    # bonus 1: [2, 2] tie -> prompt 0 (T 4); then sqrt(ln 5 / 2) > sqrt(ln 5 / 3) -> prompt 1
    assert allocate_rollouts([0.0, 0.0], 6, 2, 8, 0.05, 1.0) == [3, 3]
    # the bonus against the CI shrink: stds (0.05, 0), n0 2, bonus b = 0.35. At [2, 2] (T 4) both bonuses are
    # b sqrt(ln 4 / 2) and prompt 0's dh = 0.325025 > 0 -> [3, 2]. At [3, 2] (T 5): prompt 0 has
    # dh(3, .05) = 0.05 (4.30265/sqrt3 - 3.18245/2) = 0.044646 plus b sqrt(ln 5 / 3) = 0.256357 -> 0.301003,
    # prompt 1 has b sqrt(ln 5 / 2) = 0.313972 -> prompt 1 (with T 2 instead of 5, prompt 0 would win)
    assert allocate_rollouts([0.05, 0.0], 6, 2, 8, 0.05, 0.35) == [3, 3]
    assert allocate_rollouts([0.05, 0.0], 6, 2, 8, 0.05, 0.0) == [4, 2]  # no bonus: the CI shrink alone


def test_group_sizes_follow_the_last_visit():
    its = [{"id": i, "prompt": f"q{i}"} for i in range(3)]
    s = XRPOSampler(its, seed=0, bonus=0.0)
    s.next(3, 8)
    s.observe(scored([0] * 4 + [1] * 4 + [2] * 4, [1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1]))
    sizes = s.allocate(its, 8)  # mixed prompt 0 gets the most
    assert sum(sizes) == 24 and sizes[0] > sizes[1] == sizes[2] >= 2
    drawn = {d.item["id"]: d.n for d in s.next(3, 8)}  # the next epoch's draws carry the same allocation
    assert [drawn[i] for i in range(3)] == sizes
    with pytest.raises(ValueError, match="max_rollouts=3 is below the group size 4"):
        XRPOSampler(its, max_rollouts=3).next(3, 4)


def _math_items():
    return [
        {"id": 0, "prompt": [{"role": "user", "content": "apples and pears cost 3"}], "answer": "3"},
        {"id": 1, "prompt": [{"role": "user", "content": "apples and pears cost 5"}], "answer": "5", "solution": "2+3=5"},
        {"id": 2, "prompt": [{"role": "user", "content": "a train leaves at noon"}], "answer": "1", "solution": "1"},
    ]


def test_all_fail_prompts_are_seeded_with_the_most_similar_solved_example():
    s = XRPOSampler(_math_items(), seed=0, exemplars=1, max_prompt_chars=1000)
    s.next(3, 4)
    s.observe(scored([0, 0, 1, 1, 2, 2], [0, 0, 1, 0, 1, 1]))
    assert s.stuck == {0} and s.solved == {1, 2}
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    drawn = {d.item["id"]: d.item for d in s.next(3, 4)}
    seeded = drawn[0]["prompt"][0]["content"]
    assert "Solution: 2+3=5" in seeded and "a train" not in seeded and seeded.endswith("apples and pears cost 3")
    assert drawn[0]["id"] == 0 and drawn[0]["answer"] == "3" and "solution" not in drawn[0]  # columns unchanged
    assert drawn[1]["prompt"][0]["content"] == "apples and pears cost 5"  # not stuck: unchanged
    s.observe(scored([0, 0], [0, 1]))  # one success releases the prompt
    assert s.stuck == set()
    assert not any("Solved examples" in it["prompt"][0]["content"] for it in (d.item for d in s.next(3, 4)))


def test_seeded_prompts_stay_within_max_prompt_chars():
    # room for one exemplar (93 + 23 = 116 chars; two need 161): the less similar second one is dropped
    s = XRPOSampler(_math_items(), seed=0, exemplar_pool="dataset", exemplars=2, max_prompt_chars=120)
    s.stuck = {0}
    seeded = {d.item["id"]: d.item for d in s.next(3, 4)}[0]["prompt"][0]["content"]
    assert "2+3=5" in seeded and "train" not in seeded and len(seeded) <= 120


def _ctx(max_prompt_tokens):
    from types import SimpleNamespace

    from covey.models import build_tiny

    return SimpleNamespace(tokenizer=build_tiny("tiny-llama", seed=0)[1], max_prompt_tokens=max_prompt_tokens)


def test_by_default_seeding_is_bounded_by_the_run_s_prompt_tokens():
    from covey.models import apply_chat

    ctx = _ctx(4096)
    s = XRPOSampler(_math_items(), seed=0, exemplar_pool="dataset", exemplars=2)
    s.next(3, 4)
    s.observe(scored([0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 1, 1]))
    draws, _ = s.before_rollout(s.next(3, 4), ctx)  # the default bound: the run's tokens, not the longest item prompt
    two = {d.item["id"]: d.item for d in draws}[0]
    assert "2+3=5" in two["prompt"][0]["content"] and "train" in two["prompt"][0]["content"]
    assert s.observe(scored([0], [0])).metrics["sampler/xrpo/seeded"] == 1.0
    # one token short of the two-exemplar prompt: the less similar exemplar is dropped
    full = len(apply_chat(ctx.tokenizer, two["prompt"]))
    s.stuck = {0}
    draws, _ = s.before_rollout(s.next(3, 4), _ctx(full - 1))
    one = {d.item["id"]: d.item for d in draws}[0]["prompt"][0]["content"]
    assert "2+3=5" in one and "train" not in one and len(apply_chat(ctx.tokenizer, [{"role": "user", "content": one}])) < full
    # nothing fits: drawn unseeded, counted
    s.observe(scored([0], [0]))
    s.stuck = {0}
    draws, _ = s.before_rollout(s.next(3, 4), _ctx(5))
    assert {d.item["id"]: d.item for d in draws}[0]["prompt"][0]["content"] == "apples and pears cost 3"
    assert s.observe(scored([0], [0])).metrics["sampler/xrpo/seed_too_long"] == 1.0


def test_no_exemplar_pool_draws_the_prompt_unseeded():
    s = XRPOSampler(_math_items(), seed=0)  # pool "solved": nothing solved yet
    s.next(3, 4)
    s.observe(scored([0, 0, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0]))
    assert [it["prompt"][0]["content"] for it in sorted((d.item for d in s.next(3, 4)), key=lambda it: it["id"])] == [
        m["prompt"][0]["content"] for m in _math_items()
    ]


def test_state_round_trip_is_exact():
    make = lambda: XRPOSampler(_math_items(), seed=3, exemplar_pool="dataset", max_prompt_chars=1000)  # noqa: E731
    s = make()
    s.next(2, 4)
    s.observe(scored([0, 0, 1, 1], [0, 0, 1, 0]))
    s.next(1, 4)
    r = reload(s, make)
    a, b = s.next(5, 4), r.next(5, 4)
    assert a == b and sum(d.n for d in a) == 20


def test_more_prompts_than_items_still_fills():
    s = XRPOSampler(_math_items(), seed=0)
    assert len(s.next(10, 4)) == 10


def test_one_training_step_with_the_xrpo_estimator(tmp_path):
    m = one_step(tmp_path, {"name": "xrpo", "min_rollouts": 2}, rollout={"prompts_per_step": 4, "group_size": 3},
                 algo={"preset": "grpo", "kl": None, "advantage": {"name": "xrpo"}})  # fmt: skip
    assert m["sampler/xrpo/rollouts_min"] >= 2 and m["sampler/xrpo/rollouts_max"] <= 6
    assert m["prompts/unique"] == 4.0
