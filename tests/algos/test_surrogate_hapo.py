"""Surrogate hapo: hand-checked vectors (entropy normalisation, adaptive clip,
advantage redistribution, signed variant), a transcription of the released loss, edge cases."""

import math

import pytest
import torch

from covey.algos import SURROGATES, LossInputs
from covey.algos.surrogates import hapo_entropy_norm

H = [0.05, 0.2, 0.6, 1.0, 1.5, 2.5]
RATIO = [1.0, 1.05, 0.85, 1.3, 1.0, 1.12]


def inputs(ratio, adv, entropy, mask=None):
    ratio = torch.as_tensor(ratio, dtype=torch.float32)
    ratio = ratio if ratio.dim() == 2 else ratio[None]
    old = torch.full_like(ratio, -1.0)
    logp = (old + ratio.log()).requires_grad_(True)
    adv = torch.as_tensor(adv, dtype=torch.float32).expand_as(ratio).clone()
    ent = torch.as_tensor(entropy, dtype=torch.float32).reshape(ratio.shape)
    mask = torch.ones_like(ratio) if mask is None else torch.as_tensor(mask, dtype=torch.float32).reshape(ratio.shape)
    return LossInputs(logp=logp, old_logp=old, advantages=adv, mask=mask, entropy=ent)


def run(inp, **params):
    return SURROGATES["hapo"].bind(params)(inp)


def test_entropy_normalisation_spec_vector():
    h_hat = hapo_entropy_norm(torch.tensor([H]), torch.ones(1, 6), 0.8, signed=False)
    assert torch.allclose(h_hat[0], torch.tensor([1.0, 0.5924, 0.2694, 0.1192, 0.0, 1.0]), atol=1e-4)
    signed = hapo_entropy_norm(torch.tensor([H]), torch.ones(1, 6), 0.8, signed=True)
    assert torch.allclose(signed[0], torch.tensor([-1.0, -0.5924, -0.2694, -0.1192, 0.0, 1.0]), atol=1e-4)
    # the pivot picks the kthvalue at round(q (n - 1)): q = 0.5 -> index round(2.5) = 2 (Python rounding) -> log 0.6
    h = hapo_entropy_norm(torch.tensor([H]), torch.ones(1, 6), 0.5, signed=True)
    assert float(h[0, 2]) == 0.0 and (h[0, :2] < 0).all() and (h[0, 3:] > 0).all()


def test_loss_spec_vectors_positive_and_negative_advantage():
    loss, m = run(inputs(RATIO, 1.0, H))
    assert torch.allclose(loss[0], torch.tensor([-1.0, -1.05, -1.0790, -1.3697, -1.0, -1.12]), atol=1e-4)
    assert m["surrogate/clip_frac_high"] == pytest.approx(1 / 6)  # token 3: 1.3 > 1 + 0.2238
    loss, _ = run(inputs(RATIO, -1.0, H))
    assert torch.allclose(loss[0], torch.tensor([1.0, 1.05, 1.0790, 1.4550, 1.0, 1.12]), atol=1e-4)


def test_signed_variant_spec_vector():
    # A = +1: A_t = [0, 0.4076, 1, 1, 1, 1]; with these ratios no bound binds, so loss = -A_t r
    inp = inputs(RATIO, 1.0, H)
    loss, _ = run(inp, signed=True)
    a_t = torch.tensor([0.0, 0.4076, 1.0, 1.0, 1.0, 1.0])
    ratio = torch.tensor(RATIO)
    clipped = torch.minimum(ratio, torch.tensor([1.2, 1.2, 1.2, 1.2, 1.2, 1.4]))  # eps_high 0.2 except the top token (0.4)
    assert torch.allclose(loss[0], -a_t * clipped, atol=1e-4)


def transcription(ratio, adv, h_hat, eps_low=0.2, eps_high=0.2, c=10.0, alpha=1.0, beta=1.0):
    """The released compute_policy_loss with ada_clip and ada_advantage (float64, per token)."""
    lo = torch.full_like(h_hat, eps_low)
    hi = torch.full_like(h_hat, eps_high)
    lo[h_hat <= 0] = (lo * (1 - h_hat * alpha))[h_hat <= 0]
    hi[h_hat > 0] = (hi * (1 + h_hat * alpha))[h_hat > 0]
    a_ent = adv * (1 + beta * h_hat)
    band = (ratio > 1 - lo / 2) & (ratio < 1 + hi / 2)
    adv = torch.where(h_hat > 0, torch.where(band, adv, a_ent), torch.where(band, a_ent, adv))
    l1 = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - lo, 1 + hi))
    return torch.where(adv < 0, torch.minimum(-adv * c, l1), l1)


@pytest.mark.parametrize("signed", [False, True])
def test_matches_a_transcription_of_the_released_loss_on_random_tokens(signed):
    g = torch.Generator().manual_seed(3)
    ratio = torch.exp(torch.randn(3, 7, generator=g, dtype=torch.float64) * 0.4)
    adv = torch.randn(3, 1, generator=g, dtype=torch.float64).expand(3, 7)
    ent = torch.rand(3, 7, generator=g, dtype=torch.float64) * 3
    mask = (torch.rand(3, 7, generator=g) > 0.2).float()
    loss, _ = run(inputs(ratio.float(), adv.float(), ent.float(), mask), signed=signed, clip_alpha=0.7, adv_beta=0.5)
    h_hat = hapo_entropy_norm(ent.float(), mask, 0.8, signed).double()
    want = transcription(ratio.float().double(), adv.float().double(), h_hat, alpha=0.7, beta=0.5)
    assert torch.allclose(loss.double()[mask > 0], want[mask > 0], atol=1e-5)


def test_switches_and_gradients():
    plain = run(inputs(RATIO, 1.0, H), adaptive_clip=False, adaptive_advantage=False)[0]
    ppo = SURROGATES["ppo_clip"].bind({"dual_clip": 10.0})(inputs(RATIO, 1.0, H))[0]
    assert torch.allclose(plain, ppo)  # both off: PPO clip with dual clip
    inp = inputs(RATIO, 1.0, H)
    loss, _ = run(inp)
    (grad,) = torch.autograd.grad(loss.sum(), inp.logp)
    # token 3 clipped (1.3 > 1.2238): no gradient; token 2 unclipped: d/dlogp (-A_t r) = -1.2694 * 0.85
    assert float(grad[0, 3]) == 0.0 and grad[0, 2].item() == pytest.approx(-1.2694 * 0.85, abs=1e-4)


def test_edge_cases_and_errors():
    loss, m = run(inputs(RATIO, 0.0, H))  # A = 0 -> loss 0 everywhere
    assert torch.equal(loss, torch.zeros(1, 6))
    loss, m = run(inputs(RATIO, 1.0, H, mask=[0] * 6))  # fully masked: finite, h_hat 0, no metrics from empty masks
    assert torch.isfinite(loss).all() and all(math.isfinite(v) for v in m.values())
    same = run(inputs([1.0] * 4, 1.0, [0.7] * 4))[0]  # equal entropies: h = 0 -> plain PPO on-policy
    assert torch.allclose(same, torch.full((1, 4), -1.0))
    with pytest.raises(ValueError, match="needs LossInputs.entropy"):
        SURROGATES["hapo"].bind({})(LossInputs(logp=torch.zeros(1, 2), old_logp=torch.zeros(1, 2), advantages=torch.ones(1, 2),
                                              mask=torch.ones(1, 2)))  # fmt: skip
    assert SURROGATES["hapo"].requires == ("entropies",)
