"""BRPO (Writing-Zero): advantages relative to a bootstrapped reference rollout drawn from each group.

Covers the advantage only. Writing-Zero scores each rollout with a pairwise GenRM against the
reference; a pairwise judge that needs the reference while scoring belongs to the reward stage. Given
pointwise rewards, this estimator compares each row with its group's reference row.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["brpo"]


def _reference_rows(group: torch.Tensor, rank_fn, seed: int) -> torch.Tensor:
    """[N] bool: one uniformly drawn row per group, reproducible for a given (seed, group ids)."""
    uniq = torch.unique(group).tolist()
    # hash() of a tuple of ints is stable across processes (no string hashing involved).
    mixed = hash((int(seed), tuple(uniq))) & 0x7FFF_FFFF_FFFF_FFFF
    u = torch.rand(group.numel(), generator=torch.Generator().manual_seed(mixed), dtype=F64).to(group.device)
    return rank_fn(-u) == 0  # the row with the largest draw in each group


@register_advantage(
    "brpo", group_relative=True,
    paper="Writing-Zero: Bridge the Gap Between Non-verifiable Tasks and Verifiable Rewards",
    arxiv="2506.00103",
)
def brpo(batch: Rollouts, *, seed: int = 0, compare: Literal["diff", "sign"] = "diff") -> AdvantageResult:
    """Bootstrapped in-group reference (UNVERIFIED formula). Shapes: r [N] -> A [N], sample_mask [N].

        ref_g ~ Uniform(rows of group g)                 seeded: see below
        A_i   = r_i - r_ref(g)          compare "diff"
        A_i   = sign(r_i - r_ref(g))    compare "sign"  (a win / tie / loss verdict in {-1, 0, +1})
        the reference row itself: A = 0 and sample_mask = 0 (not trained)

    VERIFIED (abstract): one rollout of each group is picked at random as a temporary reference and
    the others are compared with it; no SFT, reference-free. UNVERIFIED (documented choices): the
    score range, whether the reference row is trained (covey: no), and whether the result is
    further group-normalised (covey: no). Reproducibility: the draw uses a torch.Generator seeded
    from ``seed`` and the batch's group ids, so the same batch always gets the same references and
    different steps (different group ids) get fresh ones.
    Edge cases: G = 1 -> the only row is the reference (excluded, A = 0); all rewards equal -> A = 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    is_ref = _reference_rows(batch.group, g.rank, seed)
    r_ref = torch.zeros(g.num, dtype=F64, device=r.device).index_add_(0, g.index[is_ref], r[is_ref])  # [B]
    diff = r - r_ref[g.index]
    adv = torch.sign(diff) if compare == "sign" else diff
    adv = torch.where(is_ref, torch.zeros_like(adv), adv)
    keep = (~is_ref).to(torch.float32)
    others = ~is_ref
    win = float((diff[others] > 0).to(F64).mean()) if others.any() else 0.0
    return result("brpo", adv, batch, g, sample_mask=keep, metrics={"win_frac": win})
