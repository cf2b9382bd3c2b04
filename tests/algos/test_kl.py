"""KL estimators (§2.3 vector, verl clamps, straight-through gradients), KL-in-reward and entropy helpers."""

import math

import pytest
import torch

from covey.algos import AGGREGATIONS, KL_ESTIMATORS
from covey.algos.aggregation import batch_totals
from covey.algos.kl import entropy_bonus, kl_reward_penalty

# §2.3: logp = -1.0, ref_logp = -1.5 -> d = 0.5
SPEC_2_3 = {
    "k1": 0.5,
    "abs": 0.5,
    "k2": 0.125,                          # 0.5 * 0.25
    "k3": math.exp(-0.5) + 0.5 - 1,       # 0.106531
    "low_var_kl": math.exp(-0.5) + 0.5 - 1,
    "k1+": 0.5,
    "k3+": math.exp(-0.5) + 0.5 - 1,
}


def kl(name, logp, ref, mask=None):
    """The estimator's kl_tok (mask: all ones by default)."""
    out, metrics = KL_ESTIMATORS[name].fn(logp, ref, torch.ones_like(ref) if mask is None else mask)
    assert "kl/mean" in metrics
    return out


@pytest.mark.parametrize("name", sorted(SPEC_2_3))
def test_spec_vector(name):
    out = kl(name, torch.tensor([[-1.0]]), torch.tensor([[-1.5]]))
    assert out.item() == pytest.approx(SPEC_2_3[name], rel=1e-6)


@pytest.mark.parametrize("name", sorted(SPEC_2_3))
def test_metrics_hold_the_masked_mean(name):
    logp = torch.tensor([[-1.0, -1.0, -5.0], [-1.0, -2.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.5, -1.0], [-1.5, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # the d = -4 token is padding
    out, metrics = KL_ESTIMATORS[name].fn(logp, ref, mask)
    assert metrics["kl/mean"] == pytest.approx(SPEC_2_3[name], rel=1e-6)  # three unmasked tokens, each d = 0.5
    assert KL_ESTIMATORS[name].fn(logp, ref, torch.zeros_like(mask))[1]["kl/mean"] == 0.0


def test_low_var_kl_reports_the_fraction_of_clamped_tokens():
    logp = torch.tensor([[-31.0, -1.0, -1.0, -40.0]])  # d = -30 (clamped), 0, 0.5, -39 (masked)
    ref = torch.tensor([[-1.0, -1.0, -1.5, -1.0]])
    _, metrics = KL_ESTIMATORS["low_var_kl"].fn(logp, ref, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    assert metrics["kl/low_var_kl/clamped"] == pytest.approx(1 / 3)
    assert metrics["kl/mean"] == pytest.approx((10.0 + 0.0 + SPEC_2_3["k3"]) / 3)


def test_every_registered_estimator_has_a_spec_vector():
    assert set(KL_ESTIMATORS) == set(SPEC_2_3)


def test_abs_and_k3_are_non_negative_where_k1_is_negative():
    logp, ref = torch.tensor([[-2.0]]), torch.tensor([[-1.0]])  # d = -1
    assert kl("k1", logp, ref).item() == -1.0
    assert kl("abs", logp, ref).item() == 1.0
    assert kl("k3", logp, ref).item() == pytest.approx(math.e - 2)  # e^1 - 1 - 1


def test_low_var_kl_clamps_input_and_output_but_k3_does_not():
    # d = -30: k3 = e^30 - 31; verl: x = clamp(30, +-20) = 20 -> e^20 - 21 -> clamp at 10
    logp, ref = torch.tensor([[-31.0]]), torch.tensor([[-1.0]])
    assert kl("low_var_kl", logp, ref).item() == 10.0
    assert kl("k3", logp, ref).item() == pytest.approx(math.exp(30) - 31, rel=1e-5)


@pytest.mark.parametrize("name,value", [("k1+", "k1"), ("k3+", "k3")])
def test_straight_through_has_forward_value_of_its_base_and_gradient_of_k2(name, value):
    ref = torch.tensor([[-1.5, -0.2, -3.0]])
    logp = torch.tensor([[-1.0, -0.9, -0.5]], requires_grad=True)
    out = kl(name, logp, ref)
    assert torch.allclose(out, kl(value, logp.detach(), ref))
    (g,) = torch.autograd.grad(out.sum(), logp)
    assert torch.allclose(g, (logp - ref).detach())  # d(0.5 d^2)/d logp = d


def test_k3_gradient_differs_from_k2_gradient():
    # k3 gradient: 1 - exp(-d); at d = 0.5 that is 0.393469, not 0.5: what k3+ replaces
    logp = torch.tensor([[-1.0]], requires_grad=True)
    (g,) = torch.autograd.grad(kl("k3", logp, torch.tensor([[-1.5]])).sum(), logp)
    assert g.item() == pytest.approx(1 - math.exp(-0.5), rel=1e-6)


def test_kl_reward_penalty_sums_masked_tokens_per_row_times_coef():
    kl = torch.tensor([[0.5, 0.25, 9.0], [1.0, 0.0, 0.0], [3.0, 3.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    penalty = kl_reward_penalty(kl, mask, coef=0.1)
    assert torch.allclose(penalty, torch.tensor([0.075, 0.1, 0.0]))  # 0.1 * (0.5 + 0.25), 0.1 * 1, empty row 0


def test_kl_reward_penalty_is_detached():
    kl = torch.ones(1, 2, requires_grad=True)
    assert not kl_reward_penalty(kl, torch.ones(1, 2), coef=1.0).requires_grad


def test_entropy_bonus_is_minus_coef_times_aggregated_entropy():
    h = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    totals = batch_totals(mask, 2)
    bonus = entropy_bonus(h, mask, totals, AGGREGATIONS["token-mean"].fn, coef=0.01)
    assert bonus.item() == pytest.approx(-0.01 * 2.0)  # token mean (1 + 3 + 2) / 3 = 2
    assert entropy_bonus(h, mask, totals, AGGREGATIONS["token-mean"].fn, coef=0.0).item() == 0.0


def test_shape_mismatch_names_both_tensors():
    with pytest.raises(ValueError, match="ref_logp"):
        KL_ESTIMATORS["k3"].fn(torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask shape"):
        KL_ESTIMATORS["k3"].fn(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 2))
