"""SPO's advantage: the reward minus the sampler's per-prompt value estimate, normalised over the batch.

Paper: "Single-stream Policy Optimization", arXiv 2509.13232 (verl-recipe `spo/spo_ray_trainer.py`):

    A_i = r_i - p_hat(prompt_i)                       (p_hat before this step's tracker update)
    A_i = (A_i - mean_batch A) / (std_batch A + 1e-8)  (global, not per group; std unbiased)

p_hat comes from the `spo` sampler (`sampler: {name: spo}`), which writes it into
``batch.baseline`` in `observe` (before advantages are computed).
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["spo"]


@register_advantage("spo", paper="Single-stream Policy Optimization", arxiv="2509.13232", requires=("spo_baseline",))
def spo(batch: Rollouts, *, eps: NonNegFloat = 1e-8, normalise: bool = True) -> AdvantageResult:
    """A = r - baseline, then (A - mean) / (std + eps) over the batch (``normalise=False``: skip it).

    Shapes: r [N], baseline [N] -> A [N]. A batch of one row has no spread: A = 0 after normalising.
    Raises `RolloutsError` when the baseline is missing (the sampler is not `spo`) or mis-shaped.
    """
    base = batch.baseline
    if base is None:
        raise RolloutsError(
            "advantage 'spo' needs batch.baseline, the per-prompt value the spo sampler writes: set sampler: {name: spo}"
        )
    if tuple(base.shape) != (len(batch),):
        raise RolloutsError(f"advantage 'spo': batch.baseline must be a [N]=({len(batch)},) tensor, got {tuple(base.shape)}")
    r = scalar_rewards(batch)
    a = r - base.to(F64).to(r.device)
    if normalise:
        a = (a - a.mean()) / ((a.std() if a.numel() > 1 else torch.zeros((), dtype=F64)) + eps)
        if a.numel() == 1:
            a = torch.zeros_like(a)
    return result("spo", a, batch, groups_of(batch), metrics={"baseline_mean": float(base.double().mean())})
