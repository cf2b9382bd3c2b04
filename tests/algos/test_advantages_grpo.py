"""GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline: hand-computed vectors,
edge cases and the vectorised-vs-loop equivalence on shuffled, non-contiguous group ids."""

import random
from collections import defaultdict

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError


def adv(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def close(a, b, tol=1e-5):
    return torch.allclose(a, torch.tensor(b, dtype=torch.float32), atol=tol, rtol=0)


# ---------------------------------------------------------------------------- grpo (§3.1)
@pytest.mark.parametrize(
    "rewards, expected",
    [
        # mean 0.5, unbiased std sqrt(1/3)=0.57735 -> 0.5/0.577351 = 0.866024
        ([1, 0, 0, 1], [0.866024, -0.866024, -0.866024, 0.866024]),
        # mean 0.25, std 0.5 -> 0.75/0.500001, -0.25/0.500001
        ([1, 0, 0, 0], [1.499997, -0.499999, -0.499999, -0.499999]),
        # mean 0.533333, std 0.351188 -> (-0.333333, 0.366667, -0.033333)/0.351189
        ([0.2, 0.9, 0.5], [-0.949155, 1.044071, -0.094916]),
        ([1, 1, 1, 1], [0, 0, 0, 0]),
    ],
)
def test_grpo_matches_spec_vectors_with_verl_eps(rewards, expected):
    assert close(adv("grpo", rollouts(rewards)).advantages, expected)


def test_grpo_with_trl_eps_matches_spec():
    # 0.5 / (0.577350 + 1e-4) = 0.865875 ; 0.75 / (0.5 + 1e-4) = 1.4997
    assert close(adv("grpo", rollouts([1, 0, 0, 1]), eps=1e-4).advantages, [0.865875, -0.865875, -0.865875, 0.865875])
    assert close(adv("grpo", rollouts([1, 0, 0, 0]), eps=1e-4).advantages[0:1], [1.4997], tol=1e-4)


def test_grpo_all_equal_rewards_give_exactly_zero_and_count_as_zero_signal():
    res = adv("grpo", rollouts([0.3, 0.3, 1, 0], groups=[5, 5, 9, 9]))
    assert torch.equal(res.advantages[:2], torch.zeros(2))
    assert res.metrics["adv/zero_signal_groups"] == 0.5


def test_grpo_singleton_group_is_zero_by_default_and_raw_reward_under_verl_rule():
    batch = rollouts([0.7, 1, 0], groups=[3, 8, 8])
    assert adv("grpo", batch).advantages[0] == 0.0
    # verl: mean := 0, std := 1 -> A = 0.7 / (1 + 1e-6)
    assert close(adv("grpo", batch, singleton="raw").advantages[:1], [0.7 / (1 + 1e-6)])


def test_grpo_batch_scale_uses_group_mean_and_batch_std():
    # groups [1, 0] and [3, 3]: centred [0.5, -0.5, 0, 0]; batch std of [1, 0, 3, 3] = 1.5 (unbiased: var = 9/4)
    batch = rollouts([1, 0, 3, 3], groups=[0, 0, 1, 1])
    assert close(adv("grpo", batch, scale="batch", eps=0.0).advantages, [1 / 3, -1 / 3, 0, 0])
    assert close(adv("grpo", batch, scale="none").advantages, [0.5, -0.5, 0, 0])


def test_grpo_weights_reward_columns_by_reward_weights():
    # scalar reward = 1*col0 + 0.5*col1 = [1.5, 0, 0.5, 0]: mean 0.5, std 0.707107
    batch = rollouts([[1, 1], [0, 0], [0, 1], [0, 0]], reward_weights=[1.0, 0.5])
    expected = [(x - 0.5) / (0.7071068 + 1e-6) for x in (1.5, 0, 0.5, 0)]
    assert close(adv("grpo", batch).advantages, expected)


def test_nan_reward_raises_an_error_naming_rewards():
    batch = rollouts([1.0, float("nan"), 0.0])
    with pytest.raises(RolloutsError, match="rewards contain NaN/inf at \\[row, column\\] \\[\\[1, 0\\]\\]"):
        adv("grpo", batch)


def test_missing_rewards_raise_a_clear_error():
    batch = rollouts([1.0, 0.0])
    batch.rewards = None
    with pytest.raises(RolloutsError, match="no rewards"):
        adv("rloo", batch)


def test_empty_completion_keeps_its_reward_in_the_group_statistics():
    # row 1 has no tokens; its reward 0 still enters mean/std (it was scored on the empty string)
    batch = rollouts([1, 0, 0, 1], lengths=[3, 0, 2, 1])
    assert close(adv("grpo", batch).advantages, [0.866024, -0.866024, -0.866024, 0.866024])


# ---------------------------------------------------------------------------- dr_grpo (§3.2)
def test_dr_grpo_matches_spec_vectors():
    assert close(adv("dr_grpo", rollouts([1, 0, 0, 0])).advantages, [0.75, -0.25, -0.25, -0.25])
    assert close(adv("dr_grpo", rollouts([0.2, 0.9, 0.5])).advantages, [-0.333333, 0.366667, -0.033333])


def test_dr_grpo_singleton_options():
    assert adv("dr_grpo", rollouts([0.4])).advantages[0] == 0.0
    assert close(adv("dr_grpo", rollouts([0.4]), singleton="raw").advantages, [0.4])


# ---------------------------------------------------------------------------- rloo
def test_rloo_subtracts_the_mean_of_the_other_samples():
    # r=[1,0,0,0]: 1 - 0 = 1 ; 0 - (1+0+0)/3 = -1/3
    assert close(adv("rloo", rollouts([1, 0, 0, 0])).advantages, [1, -1 / 3, -1 / 3, -1 / 3])
    # r=[0.2,0.9,0.5]: 0.2-0.7=-0.5 ; 0.9-0.35=0.55 ; 0.5-0.55=-0.05
    assert close(adv("rloo", rollouts([0.2, 0.9, 0.5])).advantages, [-0.5, 0.55, -0.05])


def test_rloo_singleton_group_gets_zero_or_raw_reward():
    batch = rollouts([0.6, 1, 0], groups=[1, 2, 2])
    assert adv("rloo", batch).advantages[0] == 0.0
    assert close(adv("rloo", batch, singleton="raw").advantages, [0.6, 1, -1])


# ---------------------------------------------------------------------------- reinforce_pp_baseline
def test_reinforce_pp_baseline_token_weighted_whitening_matches_hand_computation():
    # groups [1,0] -> centred [0.5,-0.5]; [2,2] -> [0,0]; lengths [1,3,2,2] (8 tokens)
    # token mean = (0.5*1 - 0.5*3)/8 = -0.125
    # var = (0.625^2*1 + 0.375^2*3 + 0.125^2*4)/8 * 8/7 = 0.875/7 = 0.125 ; rsqrt = 2.828427
    batch = rollouts([1, 0, 2, 2], groups=[0, 0, 1, 1], lengths=[1, 3, 2, 2])
    res = adv("reinforce_pp_baseline", batch)
    s = (0.125 + 1e-8) ** -0.5
    assert close(res.advantages, [0.625 * s, -0.375 * s, 0.125 * s, 0.125 * s])


def test_reinforce_pp_baseline_sequence_weighted_whitening():
    # centred [0.5,-0.5,0,0]: mean 0, unbiased var 0.5/3 -> A = x * rsqrt(1/6)
    batch = rollouts([1, 0, 2, 2], groups=[0, 0, 1, 1], lengths=[1, 3, 2, 2])
    s = (1 / 6 + 1e-8) ** -0.5
    assert close(adv("reinforce_pp_baseline", batch, whiten_by="sequence").advantages, [0.5 * s, -0.5 * s, 0, 0])


def test_reinforce_pp_baseline_gives_zero_to_rows_without_tokens_and_for_constant_batches():
    batch = rollouts([1, 0, 2, 2], groups=[0, 0, 1, 1], lengths=[1, 0, 2, 2])
    assert adv("reinforce_pp_baseline", batch).advantages[1] == 0.0
    assert torch.equal(adv("reinforce_pp_baseline", rollouts([1, 1, 0, 0], groups=[0, 0, 1, 1])).advantages, torch.zeros(4))


# ---------------------------------------------------------------------------- vectorised vs loop
def _loop_grpo(r, g, eps):
    by = defaultdict(list)
    for x, k in zip(r, g):
        by[k].append(x)
    out = []
    for x, k in zip(r, g):
        vals = torch.tensor(by[k], dtype=torch.float64)
        out.append(0.0 if len(vals) == 1 else (x - vals.mean().item()) / (vals.std().item() + eps))
    return out


def _loop_rloo(r, g):
    by = defaultdict(list)
    for x, k in zip(r, g):
        by[k].append(x)
    return [0.0 if len(by[k]) == 1 else x - (sum(by[k]) - x) / (len(by[k]) - 1) for x, k in zip(r, g)]


def test_vectorised_grpo_and_rloo_match_loop_reference_on_shuffled_noncontiguous_groups():
    rng = random.Random(0)
    ids = [10**12 + 7, -3, 42, 5, 999_999]
    sizes = [5, 1, 3, 8, 2]
    rows = [(gid, rng.choice([0.0, 1.0, 0.5, rng.random()])) for gid, n in zip(ids, sizes) for _ in range(n)]
    rng.shuffle(rows)
    g = [gid for gid, _ in rows]
    r = [x for _, x in rows]
    batch = rollouts(r, groups=g)
    assert close(adv("grpo", batch).advantages, _loop_grpo(r, g, 1e-6))
    assert close(adv("rloo", batch).advantages, _loop_rloo(r, g))
