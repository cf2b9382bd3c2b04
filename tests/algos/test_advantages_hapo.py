"""hapo (token-level group average): hand-checked test vectors, fallback, edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.registry import RegistryError


def run(batch, **params):
    return ADVANTAGES["hapo"].bind(params)(batch)


def test_spec_vectors():
    a = run(rollouts([1, 0, 0], lengths=[2, 4, 6])).advantages  # token-weighted: mu 1/6, sd 0.3727
    assert torch.allclose(a, torch.tensor([2.2361, -0.4472, -0.4472]), atol=1e-4)
    res = run(rollouts([1, 0, 0], lengths=[1, 30, 30]))  # token-level A_0 = 7.7459 >= 5 -> GRPO
    assert torch.allclose(res.advantages, torch.tensor([1.1547, -0.5773, -0.5773]), atol=1e-4)
    assert res.metrics["adv/hapo/fallback_groups"] == 1.0
    assert torch.allclose(run(rollouts([1, 1, 0, 0], lengths=[3] * 4)).advantages, torch.tensor([1.0, 1, -1, -1]), atol=1e-5)


def test_parameters_enter_the_rule():
    b = rollouts([1, 0, 0], lengths=[1, 30, 30])
    no_fb = run(b, fallback_abs=10.0).advantages  # 7.7459 < 10: token-level values kept
    assert torch.allclose(no_fb, torch.tensor([7.7459, -0.1291, -0.1291]), atol=1e-4)
    centred = run(rollouts([1, 0, 0], lengths=[2, 4, 6]), norm_by_std=False).advantages
    assert torch.allclose(centred, torch.tensor([5 / 6, -1 / 6, -1 / 6]), atol=1e-6)
    # fallback is per group: only the extreme group switches to GRPO
    two = rollouts([1, 0, 0, 1, 0, 0], groups=[0, 0, 0, 1, 1, 1], lengths=[1, 30, 30, 2, 4, 6], width=30)
    assert torch.allclose(run(two).advantages, torch.tensor([1.1547, -0.5773, -0.5773, 2.2361, -0.4472, -0.4472]), atol=1e-4)


def test_edge_cases():
    assert torch.equal(run(rollouts([1.0, 0.0], groups=[3, 9])).advantages, torch.zeros(2))  # G = 1
    assert torch.equal(run(rollouts([0.5] * 4, lengths=[1, 2, 3, 4])).advantages, torch.zeros(4))  # equal rewards
    # empty rows weigh nothing: the group behaves like its non-empty rows [1, 0] with lengths [2, 2]
    a = run(rollouts([1, 0, 1, 0], lengths=[2, 2, 0, 0], width=2)).advantages
    assert torch.allclose(a[:2], torch.tensor([1.0, -1.0]), atol=1e-5) and torch.isfinite(a).all()
    assert torch.equal(run(rollouts([1, 0], lengths=[0, 0], width=2)).advantages, torch.zeros(2))  # all-empty group
    with pytest.raises(RegistryError, match="advantage 'hapo' parameter 'fallback_abs'"):
        ADVANTAGES["hapo"].bind({"fallback_abs": 0.0})
