"""mssr: hand-checked test vectors, the spo sampler's posterior, edge cases."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.registry import RegistryError
from covey.rollouts import RolloutsError
from covey.samplers.spo import SPOSampler


def run(batch, **params):
    return ADVANTAGES["mssr"].bind(params)(batch)


def with_baseline(batch, base):
    batch.baseline = torch.tensor(base, dtype=torch.float32)
    return batch


def test_spec_vector_correct_and_wrong_rows():
    # alpha = 3, beta = 2 -> p_hat = 0.6; H = [0.5, 2.0, 0.1]; alpha_h 0.4, kappa 2
    batch = with_baseline(rollouts([1.0, 0.0], groups=[0, 1], width=3, entropies=[[0.5, 2.0, 0.1]] * 2), [0.6, 0.6])
    res = run(batch)
    assert res.advantages.shape == (2, 3)
    assert torch.allclose(res.advantages[0], torch.tensor([0.6, 0.6, 0.44]), atol=1e-6)  # a = 0.4, psi = [0.2, 0.2, 0.04]
    assert torch.allclose(res.advantages[1], torch.tensor([-0.4, -0.3, -0.56]), atol=1e-6)  # a = -0.6, psi = [0.2, 0.3, 0.04]
    assert ADVANTAGES["mssr"].requires == ("entropies",)


def test_parameters_enter_the_rule():
    batch = with_baseline(rollouts([1.0], width=3, entropies=[[0.5, 2.0, 0.1]]), [0.6])
    # kappa 4: cap |a|/4 = 0.1 -> psi = [0.1, 0.1, 0.04]
    assert torch.allclose(run(batch, kappa=4.0).advantages[0], torch.tensor([0.5, 0.5, 0.44]), atol=1e-6)
    # alpha_h 0: no shaping, A = r - p_hat on every token
    assert torch.allclose(run(batch, alpha_h=0.0).advantages[0], torch.full((3,), 0.4), atol=1e-6)


def test_the_spo_sampler_writes_the_baseline_and_updates_the_posterior():
    items = [{"id": 0, "prompt": "q"}]
    sampler = SPOSampler(items, rho_type="constant", rho=1.0)
    sampler.alpha[:] = 3.0
    sampler.beta[:] = 2.0
    batch = rollouts([1.0], groups=[0], width=3, entropies=[[0.5, 2.0, 0.1]])
    sampler.observe(batch)
    assert torch.allclose(batch.baseline, torch.tensor([0.6]))
    assert (float(sampler.alpha[0]), float(sampler.beta[0])) == (4.0, 2.0)  # spec: posterior after r = 1 (rho = 1)
    assert torch.allclose(run(batch).advantages[0], torch.tensor([0.6, 0.6, 0.44]), atol=1e-6)


def test_normalise_uses_the_batch_statistics_before_shaping():
    batch = with_baseline(rollouts([1.0, 0.0, 1.0], groups=[0, 1, 2], width=2, entropies=[[10.0, 0.0]] * 3), [0.5, 0.5, 0.0])
    a = torch.tensor([0.5, -0.5, 1.0], dtype=torch.float64)
    a = (a - a.mean()) / (a.std() + 1e-8)
    want = torch.stack([a + a.abs() / 2, a]).T.float()  # psi = |a|/2 where H = 10 (capped), 0 where H = 0
    assert torch.allclose(run(batch, normalise=True).advantages, want, atol=1e-6)
    one = with_baseline(rollouts([1.0], width=2, entropies=[[1.0, 1.0]]), [0.2])
    assert torch.equal(run(one, normalise=True).advantages, torch.zeros(1, 2))


def test_zero_gap_gives_no_shaping_and_masked_tokens_are_zero():
    batch = with_baseline(rollouts([0.5, 1.0, 0.0], groups=[0, 1, 2], lengths=[3, 1, 0], width=3, entropies=[1.0, 1.0, 1.0]),
                          [0.5, 0.0, 0.5])  # fmt: skip
    res = run(batch)
    assert torch.equal(res.advantages[0], torch.zeros(3))  # a = 0 -> cap 0
    assert torch.allclose(res.advantages[1], torch.tensor([1.4, 0.0, 0.0]), atol=1e-6)  # a = 1, psi = min(0.4, 0.5)
    assert torch.equal(res.advantages[2], torch.zeros(3))  # fully masked row
    assert all(math.isfinite(v) for v in res.metrics.values())


def test_missing_inputs_and_bad_params_are_clear_errors():
    batch = rollouts([1.0], entropies=[1.0])
    with pytest.raises(RolloutsError, match=r"baseline.*sampler: \{name: spo\}"):
        run(batch)
    with pytest.raises(RolloutsError, match=r"rollouts.entropies"):
        run(with_baseline(rollouts([1.0]), [0.5]))
    with pytest.raises(RolloutsError, match=r"must be a \[N\]=\(1,\) tensor"):
        run(with_baseline(rollouts([1.0], entropies=[1.0]), [0.5, 0.5]))
    with pytest.raises(RolloutsError, match="NaN/inf"):
        run(with_baseline(rollouts([float("nan")], entropies=[1.0]), [0.5]))
    with pytest.raises(RegistryError, match="advantage 'mssr' parameter 'kappa'"):
        ADVANTAGES["mssr"].bind({"kappa": 0.0})
