"""Importance corrections: §3.7 e vectors, sequence products, AReaL decoupled weights, edge cases."""

import math

import pytest
import torch

from covey.algos import CORRECTIONS, CorrectionInputs

# §3.7 e: rho = [3.0, 1.105171, 0.135335] = exp([log 3, 0.1, -2])
LOG_RHO = [math.log(3.0), 0.1, -2.0]


def corr(log_rho, mask=None, behaviour=-1.0):
    log_rho = torch.as_tensor(log_rho, dtype=torch.float32)
    log_rho = log_rho if log_rho.dim() == 2 else log_rho[None]
    behaviour_logp = torch.full_like(log_rho, behaviour)
    mask = torch.ones_like(log_rho) if mask is None else torch.as_tensor(mask, dtype=torch.float32)
    return CorrectionInputs(old_logp=behaviour_logp + log_rho, behaviour_logp=behaviour_logp, mask=mask)


def test_tis_token_truncates_from_above_at_cap_two():
    w, metrics = CORRECTIONS["tis"].fn(corr(LOG_RHO))
    assert torch.allclose(w[0], torch.tensor([2.0, 1.105171, 0.135335]), atol=1e-6)
    assert metrics["correction/truncated_frac"] == pytest.approx(1 / 3)
    assert metrics["correction/masked_frac"] == 0.0
    assert metrics["correction/weight_max"] == pytest.approx(2.0)


def test_token_mis_masks_ratios_outside_the_band():
    # band [0.5, 2]: 3.0 and 0.135 are dropped
    w, metrics = CORRECTIONS["mis"].fn(corr(LOG_RHO), mode="token_mask", c_min=0.5, c_max=2.0)
    assert torch.allclose(w[0], torch.tensor([0.0, 1.105171, 0.0]), atol=1e-6)
    assert metrics["correction/masked_frac"] == pytest.approx(2 / 3)


def test_token_truncate_clamps_both_sides():
    w, _ = CORRECTIONS["mis"].fn(corr(LOG_RHO), mode="token_truncate", c_min=0.5, c_max=2.0)
    assert torch.allclose(w[0], torch.tensor([2.0, 1.105171, 0.5]), atol=1e-6)


def test_sequence_level_uses_the_full_product_of_token_ratios():
    # row 0: log-ratios 0.3 + 0.4 (3rd token padded) -> rho = e^0.7 = 2.013753 (product, not geometric mean)
    # row 1: 0.1 + 0.1 + 0.1 -> e^0.3 = 1.349859
    x = corr([[0.3, 0.4, 5.0], [0.1, 0.1, 0.1]], mask=[[1, 1, 0], [1, 1, 1]])
    w, _ = CORRECTIONS["tis"].fn(x, level="sequence", cap=10.0)
    assert torch.allclose(w, torch.tensor([[math.exp(0.7)] * 2 + [0.0], [math.exp(0.3)] * 3]), atol=1e-6)
    w, _ = CORRECTIONS["tis"].fn(x, level="sequence")  # cap 2 truncates row 0
    assert torch.allclose(w[0, :2], torch.tensor([2.0, 2.0]))


def test_default_mis_is_trl_sequence_mask_with_cap_three():
    # row 0 product e^1.2 = 3.32 > 3 -> whole row masked; row 1 e^0.3 kept
    x = corr([[0.6, 0.6], [0.1, 0.2]])
    w, metrics = CORRECTIONS["mis"].fn(x)
    assert torch.all(w[0] == 0)
    assert torch.allclose(w[1], torch.full((2,), math.exp(0.3)), atol=1e-6)
    assert metrics["correction/masked_frac"] == 0.5


def test_sequence_log_ratio_is_clamped_at_twenty():
    w, _ = CORRECTIONS["tis"].fn(corr([[15.0, 15.0]]), level="sequence", cap=1e12)
    assert w[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-5)


def test_mis_rejects_inverted_band():
    with pytest.raises(ValueError, match="c_min"):
        CORRECTIONS["mis"].fn(corr(LOG_RHO), c_min=4.0, c_max=3.0)


def test_decoupled_masks_behaviour_weights_above_cap_by_default():
    # pi_prox / pi_behav = [e^2 = 7.39 (> 5, masked), 1.105171, 0.135335]
    w, metrics = CORRECTIONS["decoupled"].fn(corr([2.0, 0.1, -2.0]))
    assert torch.allclose(w[0], torch.tensor([0.0, 1.105171, 0.135335]), atol=1e-6)
    assert metrics["correction/masked_frac"] == pytest.approx(1 / 3)


def test_decoupled_clamp_action_and_no_cap():
    w, metrics = CORRECTIONS["decoupled"].fn(corr([2.0, 0.1]), action="clamp")
    assert torch.allclose(w[0], torch.tensor([5.0, 1.105171]), atol=1e-6)
    assert metrics["correction/truncated_frac"] == 0.5
    w, _ = CORRECTIONS["decoupled"].fn(corr([2.0, 0.1]), cap=None)
    assert torch.allclose(w[0], torch.tensor([math.exp(2.0), 1.105171]), atol=1e-5)


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
def test_synchronous_data_gives_unit_weights_and_zero_on_padding(name):
    w, _ = CORRECTIONS[name].fn(corr([[0.0, 0.0, 0.0]], mask=[[1, 1, 0]]))
    assert w.tolist() == [[1.0, 1.0, 0.0]]


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
def test_weights_are_detached(name):
    x = corr([[0.2, -0.1]])
    x.old_logp.requires_grad_(True)
    w, _ = CORRECTIONS[name].fn(x)
    assert not w.requires_grad


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
def test_fully_masked_row_gets_zero_weights_and_metrics_skip_it(name):
    w, metrics = CORRECTIONS[name].fn(corr([[3.0, 3.0], [0.0, 0.0]], mask=[[0, 0], [1, 1]]))
    assert w[0].tolist() == [0.0, 0.0]
    assert metrics["correction/weight_max"] == 1.0


def test_shape_mismatch_names_the_field():
    x = corr([[0.0, 0.0]])
    x.behaviour_logp = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="behaviour_logp"):
        CORRECTIONS["tis"].fn(x)
