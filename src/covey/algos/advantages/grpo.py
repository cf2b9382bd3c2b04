"""Mean-baseline group estimators: GRPO, Dr. GRPO, RLOO and REINFORCE++-baseline.

Each maps the scalar reward ``r = batch.scalar_rewards()`` ([N]) and the group ids ([N]) to one
advantage per row ([N]); the learner broadcasts it over the row's tokens. Shapes: N rows, G rows per
group (groups may differ in size), B groups. Rows with an empty completion keep their reward in the
group statistics (the reward was scored on the empty string) and carry no gradient anyway.
Surrogates, aggregation and KL live in their own registries.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import (
    NonNegFloat,
    group_normalise,
    groups_of,
    lengths,
    result,
    scalar_rewards,
    whiten,
)
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["dr_grpo", "grpo", "reinforce_pp_baseline", "rloo"]


@register_advantage(
    "grpo", group_relative=True,
    paper="DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
    arxiv="2402.03300",
)
def grpo(
    batch: Rollouts,
    *,
    eps: NonNegFloat = 1e-6,
    scale: Literal["group", "batch", "none"] = "group",
    singleton: Literal["zero", "raw"] = "zero",
) -> AdvantageResult:
    """GRPO group-normalised outcome advantage: A_i = (r_i - mean_g r) / (std_g r + eps).

    Shapes: r [N] -> A [N]. std is the unbiased (N-1) group standard deviation (verl and TRL agree).
    Options:
      eps        1e-6 is verl's value; TRL uses 1e-4, oat 1e-8.
      scale      "group" (paper), "batch" = group mean but batch std (Lite-PPO, TRL
                 scale_rewards="batch"), "none" = mean-centred only (same as `dr_grpo`).
      singleton  a group with G=1: "zero" gives A=0 (TRL); "raw" gives verl's A = r/(1+eps)
                 (verl sets mean 0, std 1 for a one-row group).
    Edge cases: all rewards equal in a group -> A=0 exactly (eps only prevents 0/0); NaN/inf rewards
    raise `RolloutsError`.
    """
    g = groups_of(batch)
    adv = group_normalise(scalar_rewards(batch), g, eps=eps, scale=scale, singleton=singleton)
    return result("grpo", adv, batch, g)


@register_advantage("dr_grpo", group_relative=True, paper="Understanding R1-Zero-Like Training: A Critical Perspective", arxiv="2503.20783")
def dr_grpo(batch: Rollouts, *, singleton: Literal["zero", "raw"] = "zero") -> AdvantageResult:
    """Dr. GRPO advantage: A_i = r_i - mean_g r (no division by the group std).

    Shapes: r [N] -> A [N]. The paper's other change (a constant loss normaliser instead of 1/|o_i|)
    is an aggregation choice, not part of this estimator. singleton: "zero" (A=0 for G=1, what the
    formula gives) or "raw" (verl's mean := 0, so A = r).
    """
    g = groups_of(batch)
    adv = group_normalise(scalar_rewards(batch), g, eps=0.0, scale="none", singleton=singleton)
    return result("dr_grpo", adv, batch, g)


@register_advantage(
    "rloo", group_relative=True,
    paper="Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs",
    arxiv="2402.14740",
)
def rloo(batch: Rollouts, *, singleton: Literal["zero", "raw"] = "zero") -> AdvantageResult:
    """RLOO: leave-one-out mean baseline, A_i = r_i - (sum_{j != i} r_j) / (G - 1) = G/(G-1) (r_i - mean_g r).

    Shapes: r [N] -> A [N]. A group of one has no other sample to form a baseline: "zero" gives A=0,
    "raw" gives A = r (verl `compute_rloo_outcome_advantage` leaves the score unchanged).
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    n = g.size[g.index]
    loo = (g.sum(r)[g.index] - r) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, r - loo, r if singleton == "raw" else torch.zeros_like(r))
    return result("rloo", adv, batch, g)


@register_advantage(
    "reinforce_pp_baseline",
    paper="REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    arxiv="2501.03262",
)
def reinforce_pp_baseline(
    batch: Rollouts,
    *,
    whiten_by: Literal["token", "sequence"] = "token",
    singleton: Literal["zero", "raw"] = "raw",
) -> AdvantageResult:
    """REINFORCE++-baseline: subtract the group mean, then whiten over the whole batch.

        a_i = r_i - mean_g r
        A_i = (a_i - mu) * rsqrt(var + 1e-8)          (verl ``masked_whiten``, var with Bessel n/(n-1))

    Shapes: r [N] -> A [N]. ``whiten_by`` "token" (verl
    `compute_reinforce_plus_plus_baseline_outcome_advantage`: a_i is broadcast over the row's tokens and
    mu, var are taken over all unmasked tokens, so long rows weigh more; empty rows get 0) or
    "sequence" (every row counts once). singleton: "raw" (verl default here: mean := 0, a = r) or "zero".
    Edge cases: all a_i equal (e.g. every group constant) -> A = 0.
    """
    g = groups_of(batch)
    centred = group_normalise(scalar_rewards(batch), g, eps=0.0, scale="none", singleton=singleton)
    weight = lengths(batch) if whiten_by == "token" else torch.ones_like(centred)
    return result("reinforce_pp_baseline", whiten(centred, weight), batch, g)
