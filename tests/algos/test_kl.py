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


@pytest.mark.parametrize("name", sorted(SPEC_2_3))
def test_spec_vector(name):
    out = KL_ESTIMATORS[name].fn(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]))
    assert out.item() == pytest.approx(SPEC_2_3[name], rel=1e-6)


def test_every_registered_estimator_has_a_spec_vector():
    assert set(KL_ESTIMATORS) == set(SPEC_2_3)


def test_abs_and_k3_are_non_negative_where_k1_is_negative():
    logp, ref = torch.tensor([[-2.0]]), torch.tensor([[-1.0]])  # d = -1
    assert KL_ESTIMATORS["k1"].fn(logp, ref).item() == -1.0
    assert KL_ESTIMATORS["abs"].fn(logp, ref).item() == 1.0
    assert KL_ESTIMATORS["k3"].fn(logp, ref).item() == pytest.approx(math.e - 2)  # e^1 - 1 - 1


def test_low_var_kl_clamps_input_and_output_but_k3_does_not():
    # d = -30: k3 = e^30 - 31; verl: x = clamp(30, +-20) = 20 -> e^20 - 21 -> clamp at 10
    logp, ref = torch.tensor([[-31.0]]), torch.tensor([[-1.0]])
    assert KL_ESTIMATORS["low_var_kl"].fn(logp, ref).item() == 10.0
    assert KL_ESTIMATORS["k3"].fn(logp, ref).item() == pytest.approx(math.exp(30) - 31, rel=1e-5)


@pytest.mark.parametrize("name,value", [("k1+", "k1"), ("k3+", "k3")])
def test_straight_through_has_forward_value_of_its_base_and_gradient_of_k2(name, value):
    ref = torch.tensor([[-1.5, -0.2, -3.0]])
    logp = torch.tensor([[-1.0, -0.9, -0.5]], requires_grad=True)
    out = KL_ESTIMATORS[name].fn(logp, ref)
    assert torch.allclose(out, KL_ESTIMATORS[value].fn(logp.detach(), ref))
    (g,) = torch.autograd.grad(out.sum(), logp)
    assert torch.allclose(g, (logp - ref).detach())  # d(0.5 d^2)/d logp = d


def test_k3_gradient_differs_from_k2_gradient():
    # k3 gradient: 1 - exp(-d); at d = 0.5 that is 0.393469, not 0.5: what k3+ replaces
    logp = torch.tensor([[-1.0]], requires_grad=True)
    (g,) = torch.autograd.grad(KL_ESTIMATORS["k3"].fn(logp, torch.tensor([[-1.5]])).sum(), logp)
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
        KL_ESTIMATORS["k3"].fn(torch.zeros(2, 3), torch.zeros(2, 2))
