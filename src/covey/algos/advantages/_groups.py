"""Shared machinery for the advantage estimators: group statistics, input checks, whitening, metrics.

Everything here is vectorised over arbitrary group ids (`Rollouts.group` values need not be contiguous,
sorted or small): `covey.rollouts.Groups` maps rows to a dense group index, and per-group sums,
means, standard deviations, minima and ranks are scatter/index operations, never a Python loop over
rows. Arithmetic runs in float64 on the batch's device (results are cast to float32 at the end), so
rounding stays far below the ~1e-6 precision of the tests' hand-computed vectors.

This module knows no method: the estimators in the sibling modules combine these pieces.
"""

from __future__ import annotations

from typing import Annotated

import pydantic
import torch
from torch import Tensor

from covey.algos.aggregation import masked_row_mean
from covey.algos.registry import AdvantageResult
from covey.rollouts import Groups, Rollouts, RolloutsError

F64 = torch.float64
ZERO_TOL = 1e-8  # |A| at or below this counts as "no signal" in the metrics


# ---------------------------------------------------------------------------- input checks
def groups_of(batch: Rollouts) -> Groups:
    """Dense group index of ``batch.group``; raises `RolloutsError` on a bad field."""
    n = len(batch)
    g = batch.group
    if not isinstance(g, Tensor) or tuple(g.shape) != (n,) or g.dtype != torch.long:
        got = f"shape {tuple(g.shape)} dtype {g.dtype}" if isinstance(g, Tensor) else type(g).__name__
        raise RolloutsError(f"group must be a [N]=({n},) long tensor of group ids, got {got}")
    if n == 0:
        raise RolloutsError("cannot compute advantages of an empty batch (N=0)")
    return Groups.of(g)


def reward_matrix(batch: Rollouts) -> Tensor:
    """[N, K] float64 rewards after checking they exist, have the right shape and are finite."""
    n = len(batch)
    r = batch.rewards
    if r is None:
        raise RolloutsError("rollouts have no rewards yet: score them before computing advantages")
    if not isinstance(r, Tensor) or r.dim() != 2 or r.shape[0] != n:
        got = tuple(r.shape) if isinstance(r, Tensor) else type(r).__name__
        raise RolloutsError(f"rewards must be an [N, K] tensor with N={n}, got {got}")
    if not torch.isfinite(r).all():
        rows = torch.nonzero(~torch.isfinite(r))[:5].tolist()
        raise RolloutsError(
            f"rewards contain NaN/inf at [row, column] {rows}: a reward function returned a non-finite "
            "value; replace it with a fallback (e.g. 0.0) before computing advantages"
        )
    w = batch.reward_weights
    if w is not None and (tuple(w.shape) != (r.shape[1],) or not torch.isfinite(w).all()):
        raise RolloutsError(f"reward_weights must be {r.shape[1]} finite values (one per reward column), got {w}")
    return r.to(F64)


def scalar_rewards(batch: Rollouts) -> Tensor:
    """[N] float64: the weighted sum of reward columns, checked (see `reward_matrix`)."""
    r = reward_matrix(batch)
    w = batch.reward_weights
    return r @ (w.to(F64) if w is not None else torch.ones(r.shape[1], dtype=F64, device=r.device))


def token_field(batch: Rollouts, name: str, method: str) -> Tensor:
    """[N, T] float64 copy of a per-token field a method needs, 0 on masked tokens; clear error when
    it is missing or non-finite on unmasked tokens."""
    val = getattr(batch, name)
    shape = tuple(batch.completion_mask.shape)
    if val is None:
        raise RolloutsError(f"advantage {method!r} needs rollouts.{name} ([N, T] float32) but it is None")
    if not isinstance(val, Tensor) or tuple(val.shape) != shape:
        got = tuple(val.shape) if isinstance(val, Tensor) else type(val).__name__
        raise RolloutsError(f"advantage {method!r}: rollouts.{name} must have shape {shape}, got {got}")
    val = torch.where(batch.completion_mask > 0, val, torch.zeros_like(val))  # padding is never read
    if not torch.isfinite(val).all():
        raise RolloutsError(f"advantage {method!r}: rollouts.{name} has NaN/inf on unmasked tokens")
    return val.to(F64)


def lengths(batch: Rollouts) -> Tensor:
    """[N] float64: number of unmasked completion tokens per row."""
    return batch.completion_mask.to(F64).sum(-1)


def seq_mean_logprob(batch: Rollouts, method: str) -> tuple[Tensor, Tensor]:
    """Length-normalised sequence log-likelihood ``s_i = (1/L_i) sum_t mask * logp`` ([N]) and L ([N]).

    Uses ``behaviour_logprobs`` (the sampling policy; pi_theta_old on-policy). Empty rows (L_i = 0)
    get s_i = 0; callers exclude them where it matters.
    """
    lp = token_field(batch, "behaviour_logprobs", method)
    m = batch.completion_mask.to(F64)
    return masked_row_mean(lp, m), m.sum(-1)


# ---------------------------------------------------------------------------- shared math
def group_normalise(r: Tensor, g: Groups, *, eps: float, scale: str, singleton: str) -> Tensor:
    """GRPO's group-relative advantage, [N] float64.

    scale "group": (r - mean_g) / (std_g + eps)   (std unbiased)
    scale "batch": (r - mean_g) / (std_batch + eps)   (Lite-PPO / TRL scale_rewards="batch")
    scale "none":  r - mean_g                        (Dr. GRPO)
    singleton "zero": a group of one row gets A = 0 (TRL); "raw": verl's mean := 0, std := 1, so
    A = r / (1 + eps) under "group", r / (std_batch + eps) under "batch", r under "none".
    """
    mean = g.mean(r)[g.index]
    single = g.size[g.index] < 2
    if scale == "group":
        denom = g.std(r)[g.index] + eps
        raw_denom = torch.full_like(r, 1.0 + eps)
    elif scale == "batch":
        denom = torch.full_like(r, float(r.std()) if r.numel() > 1 else 0.0) + eps
        raw_denom = denom
    else:
        denom = raw_denom = torch.ones_like(r)
    adv = (r - mean) / denom
    if singleton == "raw":
        return torch.where(single, r / raw_denom, adv)
    return torch.where(single, torch.zeros_like(adv), adv)


def whiten(x: Tensor, weight: Tensor, *, eps: float = 1e-8) -> Tensor:
    """verl ``masked_whiten`` of per-row values broadcast over tokens, [N] float64.

    ``weight`` [N] is each row's count (token lengths for token-weighted whitening, ones for
    sequence-weighted): mean and variance are weighted by it, the variance gets the Bessel factor
    n/(n-1) with n = sum(weight), and the result is (x - mean) * rsqrt(var + eps). Rows with weight 0
    get 0 (they have no tokens to carry an advantage).
    """
    n = weight.sum()
    if n <= 0:
        return torch.zeros_like(x)
    mean = (x * weight).sum() / n
    var = ((x - mean) ** 2 * weight).sum() / n
    if n > 1:
        var = var * n / (n - 1)
    return torch.where(weight > 0, (x - mean) * torch.rsqrt(var + eps), torch.zeros_like(x))


# ---------------------------------------------------------------------------- result + metrics
def result(
    name: str,
    adv: Tensor,
    batch: Rollouts,
    g: Groups,
    *,
    sample_mask: Tensor | None = None,
    metrics: dict[str, float] | None = None,
) -> AdvantageResult:
    """Package an estimator's output: float32 advantages, generic + namespaced metrics.

    Generic metrics (over rows kept by ``sample_mask``; for [N, T] advantages over unmasked tokens):
    adv/mean, adv/std, adv/zero_signal_groups (fraction of groups whose kept advantages are all 0).
    """
    keep = torch.ones(len(batch), dtype=F64, device=adv.device) if sample_mask is None else sample_mask.to(F64)
    a = adv.to(F64)
    if a.dim() == 1:
        vals = a[keep > 0]
        row_signal = (a.abs() > ZERO_TOL) & (keep > 0)
    else:
        m = batch.completion_mask.to(F64) * (keep if keep.dim() == 2 else keep[:, None])
        vals = a[m > 0]
        row_signal = ((a.abs() > ZERO_TOL) & (m > 0)).any(-1)
    out = {
        "adv/mean": float(vals.mean()) if vals.numel() else 0.0,
        "adv/std": float(vals.std()) if vals.numel() > 1 else 0.0,
        "adv/zero_signal_groups": float((g.sum(row_signal.to(F64)) == 0).to(F64).mean()),
    }
    for k, v in (metrics or {}).items():
        out[f"adv/{name}/{k}"] = float(v)
    mask_out = None if sample_mask is None else sample_mask.to(torch.float32)
    return AdvantageResult(a.to(torch.float32).contiguous(), out, mask_out)


# ---------------------------------------------------------------------------- parameter types
# Bounded floats for estimator parameters (the registry turns annotations into a pydantic model, so a
# negative eps or a zero temperature fails at config time with the parameter's name).
NonNegFloat = Annotated[float, pydantic.Field(ge=0.0)]
PosFloat = Annotated[float, pydantic.Field(gt=0.0)]
Fraction = Annotated[float, pydantic.Field(gt=0.0, le=1.0)]
PosInt = Annotated[int, pydantic.Field(ge=1)]
NonNegInt = Annotated[int, pydantic.Field(ge=0)]
