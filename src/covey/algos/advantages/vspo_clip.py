"""`vspo_clip_provisional`: VSPO's value-smoothing clipping of group-relative advantages.

Paper: "Enhancing Agentic RL with Progressive Reward Shaping and Value-based Sampling Policy Optimization"
(PRS + VSPO, arXiv 2512.07478). RECONSTRUCTED: the abstract says VSPO "applies value-smoothing clipping to
stabilize gradient updates"; no code or equation was found (searched). covey's reading: a group whose rewards
barely differ (a near-degenerate, low-value prompt: one success in eight) has a tiny standard deviation, and GRPO's
division by it gives its rows advantages as large as the most informative groups'; smoothing the group's scale
toward the batch's and clipping the result bounds that:

    sigma~_g = sqrt(lam sigma_g^2 + (1 - lam) sigma_batch^2)        (the smoothed scale; sigma unbiased)
    A_i      = clip((r_i - mean_g r) / (sigma~_g + eps), -clip, clip)

lam = 1 and clip = inf is GRPO. With `rollout.strategy: dynamic` and the `vspo` sampler (the value-based refill,
docs/rewards.md) this is the PRS + VSPO recipe's update as covey reconstructs it.
"""

from __future__ import annotations

from typing import Annotated

import pydantic
import torch

from covey.algos.advantages._groups import NonNegFloat, PosFloat, groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["vspo_clip_provisional"]


@register_advantage(
    "vspo_clip_provisional",
    paper="Enhancing Agentic RL with Progressive Reward Shaping and Value-based Sampling Policy Optimization",
    arxiv="2512.07478",
    group_relative=True,
)  # fmt: skip
def vspo_clip_provisional(batch: Rollouts, *, lam: Annotated[float, pydantic.Field(ge=0.0, le=1.0)] = 0.5,
                          clip: PosFloat = 3.0, eps: NonNegFloat = 1e-6) -> AdvantageResult:  # fmt: skip
    """Group-relative advantages with a smoothed scale, clipped (module docstring). Shapes: r [N] -> A [N].
    Groups of one row get 0; all-equal groups get 0. Metric adv/vspo_clip_provisional/clipped_frac."""
    g = groups_of(batch)
    r = scalar_rewards(batch)
    mean = g.mean(r)[g.index]
    sigma_b = float(r.std()) if r.numel() > 1 else 0.0
    scale = torch.sqrt(lam * g.std(r) ** 2 + (1 - lam) * sigma_b**2)[g.index]
    raw = (r - mean) / (scale + eps)
    adv = torch.where(g.size[g.index] > 1, raw.clamp(-clip, clip), torch.zeros_like(raw))
    clipped = float((raw.abs() > clip).double().mean())
    return result("vspo_clip_provisional", adv, batch, g, metrics={"clipped_frac": clipped})
