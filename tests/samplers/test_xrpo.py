import math

import pytest
import torch

from covey.samplers._sampling import t_quantile
from covey.samplers.xrpo import XRPOSampler, allocate_rollouts, ci_half_width, jaccard, shrunk_std
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
    # default bound: the longest item prompt (23 chars), so no exemplar fits and the prompt goes unseeded
    s = XRPOSampler(_math_items(), seed=0, exemplar_pool="dataset")
    s.next(3, 4)
    s.observe(scored([0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 1, 1]))
    drawn = {d.item["id"]: d.item for d in s.next(3, 4)}
    assert drawn[0]["prompt"][0]["content"] == "apples and pears cost 3"
    assert s.observe(scored([0], [0])).metrics["sampler/xrpo/seed_too_long"] == 1.0
    # room for one exemplar (93 + 23 = 116 chars; two need 161): the less similar second one is dropped
    s = XRPOSampler(_math_items(), seed=0, exemplar_pool="dataset", exemplars=2, max_prompt_chars=120)
    s.stuck = {0}
    seeded = {d.item["id"]: d.item for d in s.next(3, 4)}[0]["prompt"][0]["content"]
    assert "2+3=5" in seeded and "train" not in seeded and len(seeded) <= 120


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
