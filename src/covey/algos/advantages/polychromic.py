"""Polychromic set-level advantage: score sets of rollouts by mean reward x diversity, share it per row.

Paper: "Polychromic Objectives for Reinforcement Learning" (Ibn Hamid et al.), arXiv 2509.25424.
Status PARTIAL: the objective f(Y) = mean reward x diversity of a set
of n trajectories and the set-shared advantage are confirmed by summaries and a third-party
re-implementation (no authors' code found); the set construction and the diversity key for text are
covey's choices. For LLMs the rollout state is the prompt, so a group is the "vine".
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import torch
from torch import Tensor

from covey.algos.advantages._groups import F64, PosInt, groups_of, reward_matrix, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["polychromic"]

MAX_SETS = 100_000  # subsets per group size for sets="all" (C(G, n)); beyond it use sets="partition"


def _keys(batch: Rollouts, key: str) -> Tensor:
    """[N] long class of each row: equal classes count as the same answer in d(Y)."""
    if key == "completion":  # rows with the same completion tokens (padding ignored)
        ids = torch.where(batch.completion_mask > 0, batch.completion_ids, torch.full_like(batch.completion_ids, -1))
        return torch.unique(ids, dim=0, return_inverse=True)[1]
    if key not in batch.reward_names:
        raise RolloutsError(f"advantage 'polychromic' parameter key={key!r} is neither 'completion' nor a reward column; "
                            f"columns are {list(batch.reward_names)}")  # fmt: skip
    return torch.unique(reward_matrix(batch)[:, batch.reward_names.index(key)], return_inverse=True)[1]


def _sets(size: int, n: int, sets: str) -> Tensor:
    """[S, n] long: the member positions (0..size-1) of each set of one group."""
    if sets == "partition":
        return torch.arange((size // n) * n, dtype=torch.long).reshape(-1, n)
    count = math.comb(size, n)
    if count > MAX_SETS:
        raise RolloutsError(f"advantage 'polychromic': a group of {size} rows has C({size}, {n}) = {count} sets of size {n} "
                            f"(more than {MAX_SETS}); use sets: partition or a smaller set_size")  # fmt: skip
    return torch.tensor(list(itertools.combinations(range(size), n)), dtype=torch.long).reshape(-1, n)


def _set_advantages(r: Tensor, k: Tensor, members: Tensor, size: int) -> Tensor:
    """r, k [B, G] rewards and classes of B groups of one size; members [S, n] -> A [B, G].

    f(Y) = mean_{y in Y} r(y) * distinct(Y) / n;  A_i = mean over sets Y containing i of (f(Y) - mean_Y f).
    """
    n = members.shape[1]
    if members.shape[0] == 0:
        return torch.zeros_like(r)
    r_set, k_set = r[:, members], k[:, members]  # [B, S, n]
    ks = k_set.sort(-1).values
    distinct = 1 + (ks[..., 1:] != ks[..., :-1]).sum(-1)  # [B, S]
    f = r_set.mean(-1) * distinct.to(F64) / n
    dev = f - f.mean(-1, keepdim=True)  # [B, S]
    onehot = torch.zeros(members.shape[0], size, dtype=F64, device=r.device)
    onehot.scatter_(1, members, 1.0)  # [S, G]
    count = onehot.sum(0)  # sets each position belongs to
    return torch.where(count > 0, (dev @ onehot) / count.clamp(min=1), torch.zeros_like(count))


@register_advantage(
    "polychromic", group_relative=True,
    paper="Polychromic Objectives for Reinforcement Learning (PARTIAL: set construction and text key are covey's)",
    arxiv="2509.25424",
)  # fmt: skip
def polychromic(
    batch: Rollouts,
    *,
    set_size: PosInt = 2,
    sets: Literal["all", "partition"] = "all",
    key: str = "completion",
) -> AdvantageResult:
    """Polychromic set-shared advantage. Shapes: r [N], class [N] -> A [N].

    For each group (G rows) and its sets Y of ``set_size`` = n rows:
        f(Y)  = (1/n) sum_{y in Y} r(y) * d(Y),      d(Y) = #distinct(key(y) for y in Y) / n
        A_i   = mean over sets Y containing i of ( f(Y) - mean_{Y'} f(Y') )
    sets "all": every n-subset of the group (C(G, n), refused above 100000 per group);
    "partition": disjoint consecutive sets in row order, as the third-party re-implementation (rows
    left over when n does not divide G get A = 0).
    key: "completion" = rows with identical completion tokens are the same answer; or the name of a
    reward column whose values are classes (e.g. a reward that maps the extracted final answer to an
    id; give it weight 0). The spec suggests the extracted final answer: covey's `Rollouts` carries no
    answer strings, hence these two sources.
    Edge cases: set_size 1 gives r - mean_g r (Dr. GRPO); a group smaller than n, G = 1, or a group of
    identical answers with equal rewards gets A = 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    k = _keys(batch, key)
    adv = torch.zeros_like(r)
    pos = g.rank()  # position of each row inside its group (row order)
    for size in torch.unique(g.size).tolist():
        size = int(size)
        in_size = (g.size == size).nonzero().squeeze(1)  # [B'] dense group ids of this size
        local = torch.full((g.num,), -1, dtype=torch.long, device=r.device)
        local[in_size] = torch.arange(len(in_size), device=r.device)
        rows = (local[g.index] >= 0).nonzero().squeeze(1)
        table = torch.empty(len(in_size), size, dtype=torch.long, device=r.device)
        table[local[g.index[rows]], pos[rows]] = rows  # [B', G] row index of each group position
        members = _sets(size, set_size, sets).to(r.device)
        adv[table] = _set_advantages(r[table], k[table], members, size)
    pairs = torch.unique(torch.stack([g.index, k], 1), dim=0)  # distinct (group, class) pairs
    ones = torch.ones(len(pairs), dtype=F64, device=r.device)
    classes = torch.zeros(g.num, dtype=F64, device=r.device).index_add_(0, pairs[:, 0], ones)  # distinct keys per group
    return result("polychromic", adv, batch, g, metrics={"distinct_frac": float((classes / g.size).mean())})
