"""ACE (§3.14), XRPO (§3.15) and ARM / ProGRPO (§3.19): hand-computed vectors and options."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError


def adv(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def close(a, b, tol=1e-5):
    return torch.allclose(a, torch.tensor(b, dtype=torch.float32), atol=tol, rtol=0)


def softplus(x):
    return math.log1p(math.exp(x))


# ---------------------------------------------------------------------------- ace
# r=[1,0,0,0] -> A0 = [1.499997, -0.499999, -0.499999, -0.499999]
# 2 tokens per row; per-token log-ratio logp - ref = [+3, 0, +1, -1.5] -> summed c = [6, 0, 2, -3]
ACE_BATCH = dict(rewards=[1, 0, 0, 0], lengths=[2, 2, 2, 2], logprobs=[-1.0, -1.0, -1.0, -2.5], ref_logprobs=[-4.0, -1.0, -2.0, -1.0])


def test_ace_multiplicative_scales_only_negative_advantages_by_softplus_of_confidence():
    res = adv("ace", rollouts(**ACE_BATCH))
    a = -0.499999
    expected = [1.499997, a * (1 + softplus(0)), a * (1 + softplus(2)), a * (1 + softplus(-3))]
    # = [1.499997, -0.846573, -1.563463, -0.524293]: the positive row is untouched despite c = 6
    assert close(res.advantages, expected)


def test_ace_additive_form_and_alpha():
    res = adv("ace", rollouts(**ACE_BATCH), form="additive", alpha=0.5)
    a = -0.499999
    assert close(res.advantages, [1.499997, a - 0.5 * softplus(0), a - 0.5 * softplus(2), a - 0.5 * softplus(-3)])


def test_ace_mean_confidence_divides_by_length():
    # c / L = [3, 0, 1, -1.5]
    res = adv("ace", rollouts(**ACE_BATCH), confidence="mean")
    a = -0.499999
    assert close(res.advantages[1:], [a * (1 + softplus(0)), a * (1 + softplus(1)), a * (1 + softplus(-1.5))])


def test_ace_leaves_all_wrong_groups_at_zero_and_needs_ref_logprobs():
    assert torch.equal(adv("ace", rollouts([0, 0], ref_logprobs=[0.0, 0.0])).advantages, torch.zeros(2))
    with pytest.raises(RolloutsError, match="needs rollouts.ref_logprobs"):
        adv("ace", rollouts([1, 0]))


# ---------------------------------------------------------------------------- xrpo
def test_xrpo_matches_spec_vector_gated_on_correct():
    # s = [-0.2,-0.6,-0.4,-0.3], s_bar = -0.375: eta = [1.191246, 0.798516, 0.975310, 1.077884]
    # row 1: min(max(2.5*0.201484, 0), 0.5*0.866024) = 0.433012 ; row 0: eta > 1 -> bonus 0
    batch = rollouts([1, 1, 0, 0], lengths=[2, 2, 2, 2], logprobs=[-0.2, -0.6, -0.4, -0.3])
    assert close(adv("xrpo", batch).advantages, [0.866024, 1.299036, -0.866024, -0.866024])


def test_xrpo_uncapped_bonus_and_s_bar_over_correct_rows():
    # s_bar over correct rows = -0.4; row 1: eta = exp(-0.2) = 0.818731; lambda 1 -> bonus 0.181269 < 0.433012
    batch = rollouts([1, 1, 0, 0], lengths=[3, 3, 3, 3], logprobs=[-0.2, -0.6, -0.4, -0.3])
    res = adv("xrpo", batch, s_bar="correct", novelty_lambda=1.0)
    assert close(res.advantages, [0.866024, 0.866024 + 1 - math.exp(-0.2), -0.866024, -0.866024])


def test_xrpo_averages_logprobs_over_real_tokens_only():
    # row 1 logprobs [-0.3, -0.9, (pad)] -> s = -0.6, same as the spec row
    lp = [[-0.2, -0.2, 0.0], [-0.3, -0.9, 0.0], [-0.4, -0.4, 0.0], [-0.3, -0.3, 0.0]]
    batch = rollouts([1, 1, 0, 0], lengths=[2, 2, 2, 2], width=3, logprobs=lp)
    assert close(adv("xrpo", batch).advantages, [0.866024, 1.299036, -0.866024, -0.866024])


# ---------------------------------------------------------------------------- arm
def test_arm_shifts_advantages_towards_the_group_confidence():
    # 5 tokens -> ceil(0.2*5) = 1 lowest token: c(o) = [-2, -0.5, -1]; c(q) = mean = -7/6
    # A0 for [1,1,0] = [0.577350, 0.577350, -1.154699]; shift 0.1*(c(q) - c(o)) = [0.083333, -0.066667, -0.016667]
    lp = [[-0.1, -2.0, -0.3, -0.1, -0.1], [-0.5, -0.1, -0.1, -0.2, -0.1], [-1.0, -0.1, -0.1, -0.1, -0.1]]
    batch = rollouts([1, 1, 0], logprobs=lp, width=5)
    res = adv("arm", batch)
    assert close(res.advantages, [0.577350 + 0.5 / 6, 0.577350 - 0.4 / 6, -1.154699 - 0.1 / 6])
    # only correct rows
    assert close(adv("arm", batch, apply_to="correct").advantages, [0.577350 + 0.5 / 6, 0.577350 - 0.4 / 6, -1.154699])


def test_arm_low_probability_fraction_uses_the_ceil_of_the_lowest_tokens():
    # 10 tokens, low_frac 0.2 -> the 2 lowest: row 0 mean(-3,-1) = -2 ; row 1 mean(-0.5,-0.5) = -0.5
    lp = [[-3.0, -1.0] + [-0.1] * 8, [-0.5, -0.5] + [-0.1] * 8]
    batch = rollouts([1, 0], logprobs=lp, width=10)
    a0 = 0.5 / (0.7071068 + 1e-6)
    # c(q) = -1.25: shifts 0.1*(0.75) and 0.1*(-0.75)
    assert close(adv("arm", batch).advantages, [a0 + 0.075, -a0 - 0.075])


def test_arm_leaves_groups_without_a_correct_answer_unchanged():
    batch = rollouts([0, 0, 0], logprobs=[-0.1, -2.0, -1.0])
    assert torch.equal(adv("arm", batch).advantages, torch.zeros(3))


def test_logprob_readers_ignore_padding_but_reject_nan_on_real_tokens():
    batch = rollouts([1, 1, 0, 0], lengths=[2, 2, 2, 1], width=2, logprobs=[-0.2, -0.6, -0.4, -0.3])
    batch.behaviour_logprobs[3, 1] = float("nan")  # padding: never read
    assert close(adv("xrpo", batch).advantages, [0.866024, 1.299036, -0.866024, -0.866024])
    batch.behaviour_logprobs[0, 0] = float("nan")
    with pytest.raises(RolloutsError, match="behaviour_logprobs has NaN/inf on unmasked tokens"):
        adv("xrpo", batch)
