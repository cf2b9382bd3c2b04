"""KL estimators and the two regularisers the learner adds around the surrogate (KL, entropy).

Every registered estimator has the KL_ESTIMATORS signature (see `covey.algos.registry`):

    fn(logp [N, T], ref_logp [N, T], mask [N, T], *, **params) -> (kl_tok [N, T], metrics)

where metrics always hold ``kl/mean`` (the mean of kl_tok over unmasked tokens) and an estimator's
own ``kl/<name>/...`` figures. kl_tok estimates KL(pi_theta || pi_ref) per sampled token from d = logp - ref_logp (tokens drawn from
pi_theta; Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html, whose
r = pi_ref / pi_theta = exp(-d)).

How the learner uses them (plain functions below, so it needs no if-chains):
  * KL in the loss (`KLSpec.mode="loss"`): loss += coef * aggregation(kl_tok, mask, totals), the
    same aggregation as the policy loss (verl `use_kl_loss`; GRPO puts beta*k3 inside the per-token
    sum, which is the same thing for a linear aggregation).
  * KL in the reward (`mode="reward"`): `kl_reward_penalty` gives a per-row penalty [N] to
    SUBTRACT from the scalar reward before advantages are computed (verl `use_kl_in_reward`).
  * Entropy bonus: `entropy_bonus` = -coef * aggregation(H, mask, totals).
Estimating token entropy from logits belongs to the learner/models code, not here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from covey.algos.registry import BatchTotals, register_kl

__all__ = ["entropy_bonus", "kl_reward_penalty"]

_REF = ("ref_logprobs",)  # every estimator reads the reference policy's log-probs


def _d(logp: Tensor, ref_logp: Tensor) -> Tensor:
    if logp.shape != ref_logp.shape:
        raise ValueError(f"kl: logp shape {tuple(logp.shape)} must equal ref_logp shape {tuple(ref_logp.shape)}")
    return logp - ref_logp


def _out(kl_tok: Tensor, mask: Tensor, **extra: float) -> tuple[Tensor, dict[str, float]]:
    """(kl_tok, metrics): ``kl/mean`` over unmasked tokens (0 when none) plus `extra`."""
    if mask.shape != kl_tok.shape:
        raise ValueError(f"kl: mask shape {tuple(mask.shape)} must equal logp shape {tuple(kl_tok.shape)}")
    tokens = float(mask.sum())
    mean = float((kl_tok.detach() * mask).sum()) / tokens if tokens else 0.0
    return kl_tok, {"kl/mean": mean, **extra}


@register_kl("k1", paper="Approximating KL Divergence (Schulman, blog)", requires=_REF)
def k1(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """k1 = d = logp - ref_logp. Unbiased, high variance, can be negative per token (verl "kl")."""
    return _out(_d(logp, ref_logp), mask)


@register_kl("abs", requires=_REF)
def abs_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """|d| = |logp - ref_logp| (verl "abs"). Not an unbiased KL estimate; a non-negative distance."""
    return _out(_d(logp, ref_logp).abs(), mask)


@register_kl("k2", paper="Approximating KL Divergence (Schulman, blog)", requires=_REF)
def k2(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """k2 = 0.5 d^2 (verl "mse"). Biased, low variance; its gradient d * grad(logp) is the KL gradient on-policy."""
    return _out(0.5 * _d(logp, ref_logp) ** 2, mask)


@register_kl("k3", paper="Approximating KL Divergence (Schulman, blog)", requires=_REF)
def k3(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """k3 = exp(-d) + d - 1 = r - log r - 1 >= 0, unbiased, low variance (TRL, GRPO paper). Unclamped."""
    d = _d(logp, ref_logp)
    return _out(torch.exp(-d) + d - 1.0, mask)


@register_kl("low_var_kl", paper="Approximating KL Divergence (Schulman, blog)", requires=_REF)
def low_var_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """verl's clamped k3: x = clamp(ref_logp - logp, +-20); clamp(exp(x) - x - 1, +-10).

    Equals k3 when |d| is moderate; the clamps stop one wild token from dominating (and give zero
    gradient beyond them). verl's recommended GRPO KL (kl_loss_type=low_var_kl, coef 0.001).
    Metric ``kl/low_var_kl/clamped``: the fraction of unmasked tokens where either clamp acts.
    """
    raw = -_d(logp, ref_logp)
    x = raw.clamp(-20.0, 20.0)
    value = torch.exp(x) - x - 1.0
    clamped = ((raw.abs() > 20.0) | (value.abs() > 10.0)).float()
    tokens = float(mask.sum())
    frac = float((clamped * mask).sum()) / tokens if tokens else 0.0
    return _out(value.clamp(-10.0, 10.0), mask, **{"kl/low_var_kl/clamped": frac})


def _straight_through(value: Tensor, d: Tensor) -> Tensor:
    """Value of `value`, gradient of k2 = 0.5 d^2 (verl "k1+"/"k3+": out = k2 - sg(k2) + sg(value))."""
    k2_val = 0.5 * d**2
    return k2_val - k2_val.detach() + value.detach()


@register_kl("k1+", paper="Approximating KL Divergence (Schulman, blog)", requires=_REF)
def k1_plus(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """Straight-through: forward value k1 = d, gradient that of k2 (d * grad logp). verl "k1+"."""
    d = _d(logp, ref_logp)
    return _out(_straight_through(d, d), mask)


@register_kl("k3+", paper="Approximating KL Divergence (Schulman, blog)", requires=_REF)
def k3_plus(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
    """Straight-through: forward value k3 = exp(-d) + d - 1, gradient that of k2. verl "k3+"."""
    d = _d(logp, ref_logp)
    return _out(_straight_through(torch.exp(-d) + d - 1.0, d), mask)


def kl_reward_penalty(kl_tok: Tensor, mask: Tensor, coef: float) -> Tensor:
    """Per-row KL penalty [N] = coef * sum_t kl_tok * mask, detached.

    Use: reward_i <- reward_i - penalty_i, then compute advantages (verl `use_kl_in_reward` with an
    outcome estimator, where the token penalties -coef * kl_t are summed into the scalar return).
    `kl_tok` is usually computed from the sampling policy's log-probs, e.g. k1(old_logp, ref_logp, mask)[0].
    Empty rows get 0.
    """
    if kl_tok.shape != mask.shape:
        raise ValueError(f"kl_reward_penalty: kl_tok shape {tuple(kl_tok.shape)} must equal mask shape {tuple(mask.shape)}")
    return coef * (kl_tok.detach() * mask).sum(-1)


def entropy_bonus(
    entropy_tok: Tensor, mask: Tensor, totals: BatchTotals, aggregate: Callable[..., Tensor], coef: float
) -> Tensor:
    """Entropy term to ADD to the loss: -coef * aggregate(H, mask, totals) (verl `entropy_coeff`).

    `aggregate` is the bound aggregation of the policy loss, so micro-batches still add up.
    TRL always uses a token mean here; pass the "token-mean" aggregation to match it.
    coef > 0 rewards entropy (exploration); coef = 0 returns an exact zero without touching H.
    """
    if coef == 0.0:
        return entropy_tok.new_zeros(())
    value, _ = aggregate(entropy_tok, mask, totals)
    return -coef * value
