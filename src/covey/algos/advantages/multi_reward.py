"""GDPO: normalise each reward column inside its group, sum with the reward weights, whiten the batch.

Reads every reward column (``batch.rewards`` [N, K], ``batch.reward_weights`` [K]) rather than the
scalar reward. Scoring the columns is the reward stage's job.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import (
    F64,
    NonNegFloat,
    group_normalise,
    groups_of,
    lengths,
    result,
    reward_matrix,
    whiten,
)
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["gdpo"]


@register_advantage(
    "gdpo", group_relative=True,
    paper="GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL Optimization",
    arxiv="2601.05242",
)
def gdpo(
    batch: Rollouts,
    *,
    eps: NonNegFloat = 1e-4,
    whiten_by: Literal["sequence", "token"] = "sequence",
    singleton: Literal["zero", "raw"] = "zero",
) -> AdvantageResult:
    """GDPO advantage (normalise-then-sum, then batch normalisation). Shapes: rewards [N, K] -> A [N].

        At^k_i = (r^k_i - mean_g r^k) / (std_g r^k + eps)          per reward column k, per group
        Ah_i   = sum_k w_k At^k_i                                    w = batch.reward_weights (default 1)
        A_i    = (Ah_i - mean Ah) / (std Ah + eps)                   whiten_by="sequence" (TRL, NVIDIA README)
        A_i    = (Ah_i - mu_tok) * rsqrt(var_tok + 1e-8)            whiten_by="token" (verl masked_whiten)

    std is unbiased everywhere. ``whiten_by``: NVIDIA's TRL code weighs every row once;
    their verl code broadcasts Ah over tokens and whitens over all unmasked tokens, so longer rows
    weigh more (and its per-column eps is verl's 1e-6: set eps=1e-6 to match it fully).
    Edge cases: a column constant inside a group contributes 0 for that group; everything constant
    -> A = 0; one row in the batch -> A = 0 (no batch spread); NaN rewards raise `RolloutsError`
    (NVIDIA's TRL code zeroes them with nan_to_num instead). singleton: see `grpo`.
    """
    g = groups_of(batch)
    r = reward_matrix(batch)  # [N, K]
    w = batch.reward_weights
    w = w.to(F64) if w is not None else torch.ones(r.shape[1], dtype=F64, device=r.device)  # [K]
    per_col = [group_normalise(r[:, k], g, eps=eps, scale="group", singleton=singleton) for k in range(r.shape[1])]
    summed = torch.stack(per_col, dim=1) @ w if per_col else torch.zeros(len(batch), dtype=F64, device=r.device)  # [N]
    if whiten_by == "token":
        adv = whiten(summed, lengths(batch))
    elif summed.numel() > 1:
        adv = (summed - summed.mean()) / (summed.std() + eps)
    else:
        adv = torch.zeros_like(summed)
    return result("gdpo", adv, batch, g, metrics={"num_rewards": float(r.shape[1])})
