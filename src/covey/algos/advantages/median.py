"""MC-GRPO: median-centred group advantage with a MAD scale and the pivot row excluded.

Covers only the advantage; sampling G+1 completions per prompt is the rollout stage's job (ask for
G+1 samples per group), and dropping the pivot row happens in the loss through ``sample_mask``.
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import NonNegFloat, groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["mc_grpo"]


@register_advantage(
    "mc_grpo", group_relative=True,
    paper="MC-GRPO: Median-Centered Group Relative Policy Optimization for Small-Rollout Reinforcement Learning",
    arxiv="2601.22582",
)
def mc_grpo(batch: Rollouts, *, mad_eps: NonNegFloat = 1e-3, count_multiplier: bool = False) -> AdvantageResult:
    """Median-centred advantage: A_j = (r_j - med_g) / (median_j |r_j - med_g| + mad_eps).

    Shapes: r [N] -> A [N], sample_mask [N]. The method samples G+1 completions per prompt (an odd
    group, so the median is an actual sample) and trains on G of them: the *pivot* -- the row whose
    reward is the median -- gets sample_mask 0. Groups of even size use the lower median (what
    torch.median returns). Source: lotusroot-kim/MC-GRPO `grpo_trainer_gsm.py` / `grpo_trainer_math.py`.

    Details:
      * the std is not used at all (the reference trainer skips it when mc=True);
      * ties at the median: the pivot is the row in the middle slot ((n-1)//2) of the group stably
        sorted by reward, ties kept in row order (torch.median's own tie choice is
        implementation-defined); every other median-valued row stays in the batch with A = 0;
      * ``count_multiplier`` (gsm trainer only, off by default): per group, every non-zero A
        (|A| > 1e-6) is multiplied by (G+1) / #non-zero;
      * binary rewards often give MAD = 0, so |A| = 1/mad_eps = 1000 -- the released behaviour;
      * all rewards equal -> A = 0; G = 1 -> A = 0 and the only row is the pivot (excluded).
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    n = g.size.long()
    mid = (n - 1) // 2  # [B] lower-median slot
    rank = g.rank(key=r)  # position in the group sorted by reward
    is_pivot = rank == mid[g.index]
    med = torch.zeros(g.num, dtype=r.dtype, device=r.device).index_add_(0, g.index[is_pivot], r[is_pivot])  # [B]
    dev = (r - med[g.index]).abs()
    dev_rank = g.rank(key=dev)
    at_mid = dev_rank == mid[g.index]
    mad = torch.zeros(g.num, dtype=r.dtype, device=r.device).index_add_(0, g.index[at_mid], dev[at_mid])  # [B]
    adv = (r - med[g.index]) / (mad[g.index] + mad_eps)
    if count_multiplier:
        nonzero = (adv.abs() > 1e-6).to(r.dtype)
        k = g.sum(nonzero)  # [B]
        mult = torch.where(k > 0, g.size / k.clamp(min=1), torch.ones_like(k))
        adv = torch.where(nonzero > 0, adv * mult[g.index], adv)
    keep = (~is_pivot).to(torch.float32)
    metrics = {"mad_zero_groups": float((mad == 0).to(r.dtype).mean()), "pivots": float(is_pivot.sum())}
    return result("mc_grpo", adv, batch, g, sample_mask=keep, metrics=metrics)
