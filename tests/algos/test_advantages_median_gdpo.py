"""MC-GRPO and GDPO: hand-computed vectors, options and edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES


def adv(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def close(a, b, tol=1e-5):
    return torch.allclose(a, torch.tensor(b, dtype=torch.float32), atol=tol, rtol=0)


# ---------------------------------------------------------------------------- mc_grpo
def test_mc_grpo_matches_spec_vector_and_excludes_the_pivot():
    # sorted [0.2,0.4,0.5,0.7,0.9]: med 0.5 (row 1); |r-med| = [0.3,0,0.4,0.1,0.2] -> MAD 0.2, +1e-3 = 0.201
    res = adv("mc_grpo", rollouts([0.2, 0.5, 0.9, 0.4, 0.7]))
    assert close(res.advantages, [-1.492537, 0, 1.990050, -0.497512, 0.995025])
    assert res.sample_mask.tolist() == [1, 0, 1, 1, 1]


def test_mc_grpo_gsm_count_multiplier_scales_nonzero_advantages_by_group_over_nonzero():
    # 4 non-zero of 5 -> x 5/4
    res = adv("mc_grpo", rollouts([0.2, 0.5, 0.9, 0.4, 0.7]), count_multiplier=True)
    assert close(res.advantages, [-1.865672, 0, 2.487562, -0.621891, 1.243781])


def test_mc_grpo_binary_rewards_blow_up_to_one_over_mad_eps():
    # med 1, MAD 0 -> /1e-3; with multiplier 5/2
    batch = rollouts([1, 0, 0, 1, 1])
    assert close(adv("mc_grpo", batch).advantages, [0, -1000, -1000, 0, 0], tol=1e-3)
    assert close(adv("mc_grpo", batch, count_multiplier=True).advantages, [0, -2500, -2500, 0, 0], tol=1e-3)
    # tie at the median: stable sort by reward = rows [1,2,0,3,4]; the middle slot holds row 0
    assert adv("mc_grpo", batch).sample_mask.tolist() == [0, 1, 1, 1, 1]


def test_mc_grpo_uses_the_lower_median_for_even_groups_and_handles_several_groups():
    # group 7: [3,0,2,1] -> lower median 1 (row 3), MAD median(|[2,-1,1,0]|)=lower of [0,1,1,2] = 1
    # group 2: [5,5,5] (rows 1,3,5) -> all equal -> 0; middle slot of the stable order is row 3
    batch = rollouts([3, 5, 0, 5, 2, 5, 1], groups=[7, 2, 7, 2, 7, 2, 7])
    res = adv("mc_grpo", batch)
    assert close(res.advantages, [2 / 1.001, 0, -1 / 1.001, 0, 1 / 1.001, 0, 0])
    assert res.sample_mask.tolist() == [1, 1, 1, 0, 1, 1, 0]
    assert res.metrics["adv/mc_grpo/pivots"] == 2.0


def test_mc_grpo_singleton_group_is_its_own_pivot():
    res = adv("mc_grpo", rollouts([0.3]))
    assert res.advantages.tolist() == [0.0] and res.sample_mask.tolist() == [0.0]


# ---------------------------------------------------------------------------- gdpo
def test_gdpo_matches_spec_vector():
    # r1=[1,1,0,0] -> +-0.865875 ; r2=[1,0,0,0] -> [1.4997,-0.4999,...] ; sum -> batch whitening (eps 1e-4)
    batch = rollouts([[1, 1], [1, 0], [0, 0], [0, 0]])
    assert close(adv("gdpo", batch).advantages, [1.332031, 0.206077, -0.769054, -0.769054], tol=2e-5)


def test_gdpo_single_reward_is_grpo_then_batch_whitening():
    batch = rollouts([1, 0, 0, 0.5, 1, 1], groups=[0, 0, 0, 1, 1, 1])
    a = ADVANTAGES["grpo"].bind({"eps": 1e-4})(batch).advantages.double()
    expected = (a - a.mean()) / (a.std() + 1e-4)
    assert close(adv("gdpo", batch).advantages, expected.tolist())


def test_gdpo_weights_columns_before_batch_normalisation():
    # weight 0 removes column 1 entirely: result = single-column GDPO of column 0
    both = rollouts([[1, 0], [0, 1], [0, 1], [1, 0]], reward_weights=[1.0, 0.0])
    only = rollouts([1, 0, 0, 1])
    assert close(adv("gdpo", both).advantages, adv("gdpo", only).advantages.tolist())


def test_gdpo_token_weighted_whitening_matches_hand_computation():
    # one column, group [1,0] -> [+a,-a]; lengths [1,3]: token mean -a/2, deviations [1.5a, -0.5a]
    # unbiased token var = (2.25 + 3*0.25) a^2 / 3 = a^2 -> A = [1.5, -0.5]
    batch = rollouts([1, 0], lengths=[1, 3])
    assert close(adv("gdpo", batch, whiten_by="token").advantages, [1.5, -0.5], tol=1e-4)
    assert close(adv("gdpo", batch, whiten_by="sequence").advantages, [0.707072, -0.707072], tol=1e-4)


@pytest.mark.parametrize("whiten_by", ["sequence", "token"])
def test_gdpo_constant_rewards_give_zero(whiten_by):
    batch = rollouts([[1, 0.5]] * 3 + [[0, 0.2]] * 3, groups=[0, 0, 0, 1, 1, 1])
    assert torch.equal(adv("gdpo", batch, whiten_by=whiten_by).advantages, torch.zeros(6))


def test_gdpo_single_row_batch_gives_zero():
    assert adv("gdpo", rollouts([[1, 1]])).advantages.tolist() == [0.0]
