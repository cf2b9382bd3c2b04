"""noisy_verifier: PGBC / PGFC corrections of a noisy binary verifier (arXiv 2510.00915), by hand."""

import pytest
import torch

from covey.algos import ADVANTAGES
from covey.algos.advantages.noisy_verifier import appeal_fn_rate, backward_corrected, forward_weight
from covey.registry import RegistryError
from covey.rollouts import RolloutsError
from tests.algos._make import rollouts


def _adv(batch, **params):
    return ADVANTAGES.get("noisy_verifier").bind({"verdict_column": "r0", **params})(batch)


def test_backward_is_the_unbiased_surrogate_reward():
    # rho0 0.1, rho1 0.2: (1 - 0.1) / 0.7 = 1.285714, (0 - 0.1) / 0.7 = -0.142857
    out = _adv(rollouts([1.0, 0.0, 1.0, 1.0]), correction="backward", rho0=0.1, rho1=0.2)
    assert out.advantages.tolist() == pytest.approx([9 / 7, -1 / 7, 9 / 7, 9 / 7], abs=1e-6)


def test_forward_weights_need_only_the_false_negative_rate():
    out = _adv(rollouts([1.0, 0.0, 1.0, 1.0]), correction="forward", rho0=0.3, rho1=0.2)  # rho0 is not read
    assert out.advantages.tolist() == pytest.approx([0.2, -0.8, 0.2, 0.2], abs=1e-6)


@pytest.mark.parametrize("rho0,rho1", [(0.0, 0.0), (0.1, 0.2), (0.3, 0.05), (0.45, 0.45)])
def test_expectations_over_the_noise_channel(rho0, rho1):
    """E[R^ | R] = R (backward); E[w | R] = (1 - rho0 - rho1)(R - 1) (forward): exact sums over R~."""
    one, zero = torch.tensor([1.0]), torch.tensor([0.0])
    for true in (0, 1):
        p_pos = (1 - rho1) if true else rho0  # P(R~ = 1 | R)
        e_back = p_pos * backward_corrected(one, rho0, rho1) + (1 - p_pos) * backward_corrected(zero, rho0, rho1)
        e_fwd = p_pos * forward_weight(one, rho1) + (1 - p_pos) * forward_weight(zero, rho1)
        assert float(e_back) == pytest.approx(true)
        assert float(e_fwd) == pytest.approx((1 - rho0 - rho1) * (true - 1))


def test_group_baseline_cancels_the_offset_and_keeps_the_scale():
    # groups [0, 0, 1, 1]; backward values [9/7, -1/7, 9/7, 9/7]: group 0 mean 4/7 -> [5/7, -5/7]; group 1 -> 0
    batch = rollouts([1.0, 0.0, 1.0, 1.0], groups=[0, 0, 1, 1])
    back = _adv(batch, correction="backward", rho0=0.1, rho1=0.2, baseline="group")
    assert back.advantages.tolist() == pytest.approx([5 / 7, -5 / 7, 0.0, 0.0], abs=1e-6)
    fwd = _adv(batch, correction="forward", rho1=0.2, baseline="group")  # = dr_grpo
    dr = ADVANTAGES.get("dr_grpo").bind({})(batch)
    assert torch.allclose(fwd.advantages, dr.advantages)


def test_appeals_estimate_rho1_from_the_overturned_negatives():
    # observed [1, 1, 1, 0, 0], the appeal passes row 3: 1 overturned of 3 + 1 positives -> rho1^ 0.25
    batch = rollouts([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], reward_names=["rule", "llm"],
                     reward_weights=[1.0, 0.0])  # fmt: skip
    out = _adv(batch, verdict_column="rule", appeal="llm", rho1=0.4)  # the configured rho1 is replaced
    assert out.advantages.tolist() == pytest.approx([0.25, 0.25, 0.25, -0.75, -0.75])
    assert out.metrics["adv/noisy_verifier/rho1"] == pytest.approx(0.25)
    assert out.metrics["adv/noisy_verifier/overturned"] == 1
    assert appeal_fn_rate(torch.zeros(3), torch.zeros(3)) == (0.0, 0)  # nothing positive: no estimate, 0


def test_a_non_binary_reward_is_refused():
    with pytest.raises(RolloutsError, match="binary verifier"):
        _adv(rollouts([1.0, 0.5]))
    with pytest.raises(RolloutsError, match="no reward column 'nope'"):
        _adv(rollouts([1.0, 0.0]), verdict_column="nope")


@pytest.mark.parametrize("params,msg", [
    ({"correction": "backward", "rho0": 0.45, "rho1": 0.499}, None),  # fine: 0.949 < 1
    ({"rho0": 0.5}, "rho0"),  # the channel model's range [0, 0.5)
    ({"correction": "backward", "appeal": "llm"}, "appeals estimate only rho1"),
])  # fmt: skip
def test_config_refusals(params, msg):
    entry = ADVANTAGES.get("noisy_verifier")
    if msg is None:
        entry.validate_params(params)
        return
    with pytest.raises(RegistryError, match=msg):
        entry.validate_params(params)


def test_singleton_group_with_baseline_gets_zero():
    out = _adv(rollouts([1.0, 0.0, 1.0], groups=[0, 0, 1]), rho1=0.1, baseline="group")
    assert out.advantages.tolist() == pytest.approx([0.5, -0.5, 0.0])


def test_noise_free_forward_without_baseline_is_reinforce_shifted_by_one():
    out = _adv(rollouts([1.0, 0.0]))  # rho1 = 0: w = R~ - 1
    assert out.advantages.tolist() == [0.0, -1.0]
