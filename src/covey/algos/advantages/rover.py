"""ROVER's outcome advantage: a batch-level success-rate shaping of binary rewards."""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["rover"]


@register_advantage(
    "rover",
    paper="ROVER: Random Policy Valuation for Diverse Reasoning (VERIFIED-CODE)",
    arxiv="2509.24981",
)  # fmt: skip
def rover(batch: Rollouts, *, pos: NonNegFloat = 5.0, neg: NonNegFloat = 2.0) -> AdvantageResult:
    """ROVER advantage: A_i = pos (1 - p) for rows with r_i > 0, -neg p otherwise; p = the batch's
    fraction of rows with r > 0. Shapes: r [N] -> A [N].

    yuxiaooye/ROVER `ea5ce635ee03` `Math/verl/trainer/ppo/core_algos.py::compute_rover_outcome_advantage`
    (`5 * (1 - sum(scores > 0) / bsz)` and `-2 * (1 - sum(scores <= 0) / bsz)` = -2 p): the whole
    step's batch, not per group (the group ids are unused); defaults 5 and 2 are the code's constants.
    The math script itself trains ROVER with `grpo` advantages; this is the repository's `rover`
    estimator (rewards [1,0,0,1,0,0,0,0] -> p 0.25 -> [3.75, -0.5, ...]).
    Edge cases: all rows correct -> A = 0 for all; none correct -> A = 0 for all. Metric adv/rover/success_frac.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    win = r > 0
    p = float(win.to(F64).mean()) if len(r) else 0.0
    adv = torch.where(win, torch.full_like(r, pos * (1.0 - p)), torch.full_like(r, -neg * p))
    return result("rover", adv, batch, g, metrics={"success_frac": p})
