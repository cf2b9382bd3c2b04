"""Importance corrections: detached per-token weights that multiply the surrogate loss.

Every registered function has the CORRECTIONS signature (see `covey.algos.registry`):

    fn(inp: CorrectionInputs, *, **params) -> (weight_tok [N, T] detached, metrics)

They fix the mismatch between the policy that SAMPLED the tokens (the engine's behaviour log-probs)
and the policy the surrogate's ratio is taken against (`old_logp`: the trainer's recomputation of
pi_old, or AReaL's proximal policy). The learner multiplies the surrogate's per-token loss by the
weight before aggregation; a weight of 0 removes a token's loss but NOT its place in the
aggregation's denominators (the mask is unchanged), as in TRL, verl and AReaL. Weights are 0 on
padding. Log-ratios are clamped to +-20 before exp (verl) so weights stay finite.

Metrics ("correction/..."): weight mean/min/max over unmasked tokens, masked_frac (weight set to 0
by a bound) and truncated_frac (weight capped).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field
from torch import Tensor

from covey.algos.aggregation import masked_summary
from covey.algos.registry import CorrectionInputs, register_correction

Positive = Annotated[float, Field(gt=0.0)]
NonNeg = Annotated[float, Field(ge=0.0)]
_CLAMP = 20.0


def _log_rho(inp: CorrectionInputs, level: str) -> Tensor:
    """log(pi_old / pi_behav) per token [N, T], or the row's summed log-ratio broadcast to tokens (full product)."""
    for name in ("old_logp", "behaviour_logp"):
        got = tuple(getattr(inp, name).shape)
        if got != tuple(inp.mask.shape):
            raise ValueError(f"CorrectionInputs.{name} has shape {got}; it must match mask {tuple(inp.mask.shape)}")
    d = (inp.old_logp - inp.behaviour_logp).detach() * inp.mask
    if level == "sequence":
        d = d.sum(-1, keepdim=True).expand_as(inp.mask)  # [N, 1] -> [N, T]
    return d.clamp(-_CLAMP, _CLAMP)


def _metrics(weight: Tensor, mask: Tensor, masked: Tensor, truncated: Tensor) -> dict[str, float]:
    denom = mask.sum().clamp(min=1.0)
    fracs = torch.stack([(masked.float() * mask).sum() / denom, (truncated.float() * mask).sum() / denom]).tolist()
    out = {"correction/masked_frac": fracs[0], "correction/truncated_frac": fracs[1]}
    out.update(masked_summary(weight, mask, "correction/weight"))
    return out


@register_correction(
    "tis",
    paper="Your Efficient RL Framework Secretly Brings You Off-Policy RL Training (Feng Yao et al., blog)",
)
def tis(
    inp: CorrectionInputs, *, level: Literal["token", "sequence"] = "token", cap: Positive = 2.0
) -> tuple[Tensor, dict[str, float]]:
    """Truncated importance sampling for the engine/trainer mismatch.

    Source: Feng Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
    (blog, 2025; no arXiv id); verl PR b8dc5377c by the author, verl `rollout_corr_helper.py`.

        rho_it = exp(clamp(old_logp - behaviour_logp, +-20))                       level="token"
        rho_i  = exp(clamp(sum_t mask (old_logp - behaviour_logp), +-20))          level="sequence" (full
                 product of token ratios, not GSPO's geometric mean), broadcast to the row's tokens
        w      = min(rho, cap)                                                      [N, T], 0 on padding

    Default cap C = 2.0 (the PR's example and verl's rollout_is_threshold). Truncated from above only.
    Edge cases: equal log-probs give w = 1; an empty row gives all-zero weights (padding).
    """
    rho = torch.exp(_log_rho(inp, level))
    truncated = rho > cap
    weight = rho.clamp(max=cap) * inp.mask
    return weight, _metrics(weight, inp.mask, torch.zeros_like(truncated), truncated)


@register_correction(
    "mis",
    paper="Your Efficient RL Framework Secretly Brings You Off-Policy RL Training (Feng Yao et al., blog)",
)
def mis(
    inp: CorrectionInputs,
    *,
    mode: Literal["token_mask", "sequence_mask", "token_truncate", "sequence_truncate"] = "sequence_mask",
    c_min: NonNeg | None = None,
    c_max: Positive = 3.0,
) -> tuple[Tensor, dict[str, float]]:
    """Masked / truncated importance sampling (MIS, IcePop-style), TRL's `vllm_importance_sampling_mode`.

    Source: as `tis`; TRL `GRPOTrainer` (IS block), which this follows.

        rho            token (token_*) or full-sequence product (sequence_*), log clamped +-20
        *_mask:        w = rho * 1[c_min <= rho <= c_max]     (tokens/rows outside the band are dropped)
        *_truncate:    w = clamp(rho, c_min, c_max)
    Defaults = TRL's: mode "sequence_mask", c_max = 3.0, c_min = None (no lower bound). IcePop's own
    thresholds are UNVERIFIED. Edge cases: c_min > c_max is rejected; empty rows give zero weights.
    """
    if c_min is not None and c_min > c_max:
        raise ValueError(f"mis: c_min ({c_min}) must be <= c_max ({c_max})")
    level, action = mode.split("_")
    rho = torch.exp(_log_rho(inp, level))
    low = rho < c_min if c_min is not None else torch.zeros_like(rho, dtype=torch.bool)
    out_of_band = low | (rho > c_max)
    if action == "mask":
        weight = torch.where(out_of_band, torch.zeros_like(rho), rho) * inp.mask
        return weight, _metrics(weight, inp.mask, out_of_band, torch.zeros_like(out_of_band))
    weight = rho.clamp(min=c_min, max=c_max) * inp.mask
    return weight, _metrics(weight, inp.mask, torch.zeros_like(out_of_band), out_of_band)


@register_correction(
    "decoupled",
    paper="AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning",
    arxiv="2505.24298",
)
def decoupled(
    inp: CorrectionInputs, *, cap: Positive | None = 5.0, action: Literal["mask", "clamp"] = "mask"
) -> tuple[Tensor, dict[str, float]]:
    """AReaL decoupled PPO: behaviour weight pi_prox / pi_behav, with tokens above `cap` masked (or clamped).

    Paper: "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning"
    (arXiv 2505.24298); code `areal/utils/functional/functional.py::ppo_actor_loss_fn`.

    With `old_logp` = the proximal policy pi_prox (recomputed with the current weights before the
    update), the surrogate's ratio pi_theta / pi_prox is clipped as usual and each token's loss is
    multiplied by

        w_it = exp(clamp(logp_prox - logp_behav, +-20))                               [N, T]
        action="mask":  w = 0 where w > cap   (AReaL default rejection: metric ratio, level token, upper 5.0)
        action="clamp": w = min(w, cap)
        cap=None: no bound.
    The aggregation keeps masked tokens in its denominator ("denominator keeps the original token
    count" in AReaL). With pi_prox = pi_behav (synchronous training) w = 1 and this is plain PPO.
    """
    rho = torch.exp(_log_rho(inp, "token"))
    over = rho > cap if cap is not None else torch.zeros_like(rho, dtype=torch.bool)
    none = torch.zeros_like(over)
    if action == "mask":
        weight = torch.where(over, torch.zeros_like(rho), rho) * inp.mask
        return weight, _metrics(weight, inp.mask, over, none)
    weight = (rho if cap is None else rho.clamp(max=cap)) * inp.mask
    return weight, _metrics(weight, inp.mask, none, over)
