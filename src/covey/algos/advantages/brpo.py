"""BRPO (Writing-Zero): advantages relative to a bootstrapped reference rollout drawn from each group.

`reference_rows` is the one home of the reference draw: this advantage and the `writing_zero`
pairwise GenRM reward (`covey.rewards.judge.writing_zero`, which judges every row against that
reference while scoring) both call it, so they agree on the reference row without a shared column.
The draw depends only on (seed, the row's position in its group, its completion token ids): the
reward sees those as the ``group`` and ``completion_ids`` columns, the advantage as `Rollouts` fields.
Given pointwise rewards, this estimator compares each row with its group's reference row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

import torch

from covey.algos.advantages._groups import F64, groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["brpo", "reference_rows"]


def reference_rows(group: Sequence[int], completion_ids: Sequence[Sequence[int]], seed: int) -> list[bool]:
    """One reference row per group: the row with the smallest SHA-256 of (seed, position in its group,
    completion token ids); a tie (impossible unless two keys collide) goes to the first row.

    Uniform over the group for distinct rows, fresh every step (new completions), identical in every
    process, and independent of how the batch is cut into chunks (only the group's own rows matter).

    >>> reference_rows([5, 5, 9], [[1, 2], [1, 2], [3]], seed=0)[2]   # a group of one is its own reference
    True
    """
    best: dict[int, tuple[bytes, int]] = {}
    seen: dict[int, int] = {}
    for i, (g, ids) in enumerate(zip(group, completion_ids)):
        pos = seen.get(g, 0)
        seen[g] = pos + 1
        key = hashlib.sha256(f"{int(seed)}/{pos}/{','.join(map(str, ids))}".encode()).digest()
        if g not in best or key < best[g][0]:
            best[g] = (key, i)
    refs = {i for _, i in best.values()}
    return [i in refs for i in range(len(group))]


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
    further group-normalised (covey: no). The draw is `reference_rows` (seed, position in the group,
    completion tokens): the same batch always gets the same references, every step fresh ones, and the
    `writing_zero` reward judges against the same row (with its ``reference_seed`` equal to ``seed``).
    Edge cases: G = 1 -> the only row is the reference (excluded, A = 0); all rewards equal -> A = 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    ids = [row[:n].tolist() for row, n in zip(batch.completion_ids, batch.lengths.tolist())]
    is_ref = torch.tensor(reference_rows(batch.group.tolist(), ids, seed), dtype=torch.bool, device=r.device)
    r_ref = torch.zeros(g.num, dtype=F64, device=r.device).index_add_(0, g.index[is_ref], r[is_ref])  # [B]
    diff = r - r_ref[g.index]
    adv = torch.sign(diff) if compare == "sign" else diff
    adv = torch.where(is_ref, torch.zeros_like(adv), adv)
    keep = (~is_ref).to(torch.float32)
    others = ~is_ref
    win = float((diff[others] > 0).to(F64).mean()) if others.any() else 0.0
    return result("brpo", adv, batch, g, sample_mask=keep, metrics={"win_frac": win})
