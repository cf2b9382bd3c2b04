"""Advantages written as sums over pairs of rows of the same group.

Both estimators here build `[N, N]` pair matrices restricted to same-group pairs (vectorised, no loop
over rows or groups; memory O(N^2), e.g. 4096 rows -> 16.8M float64 = 134 MB per matrix).

    dagrpo_provisional   GRPO's advantage as (1/G) sum_j (r_i - r_j) / sigma_g, with indistinct pairs masked
"""

from __future__ import annotations

import torch
from torch import Tensor

from covey.algos.advantages._groups import F64, Groups, NonNegFloat, groups_of, reward_matrix, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["dagrpo_provisional"]

TIE_TOL = 1e-6  # rewards are float32: a gap of exactly tau (0.9 - 0.8 in float32 is 0.09999996) counts as reaching it


def _same_group(g: Groups) -> Tensor:
    """[N, N] bool: rows i and j belong to the same group."""
    return g.index[:, None] == g.index[None, :]


def _column(batch: Rollouts, name: str, param: str, method: str) -> Tensor:
    """[N] float64 reward column `name` (checked finite), with an error naming the parameter."""
    cols = reward_matrix(batch)
    if not name:
        raise RolloutsError(f"advantage {method!r} needs {param}: the name of a reward column "
                            f"(columns are {list(batch.reward_names)})")  # fmt: skip
    if name not in batch.reward_names:
        raise RolloutsError(f"advantage {method!r} parameter {param}={name!r} is not a reward column; "
                            f"columns are {list(batch.reward_names)}")  # fmt: skip
    return cols[:, batch.reward_names.index(name)]


@register_advantage(
    "dagrpo_provisional", group_relative=True,
    paper="DaGRPO: Rectifying Gradient Conflict in Reasoning via Distinctiveness-Aware Group Relative Policy "
          "Optimization (UNVERIFIED reconstruction)",
    arxiv="2512.06337",
)  # fmt: skip
def dagrpo_provisional(
    batch: Rollouts, *, score_column: str = "", tau: NonNegFloat = 0.1, eps: NonNegFloat = 1e-6
) -> AdvantageResult:
    """DaGRPO sequence-level gradient rectification (UNVERIFIED reconstruction). Shapes: r, q [N] -> A [N].

    Uses the identity grpo_i = (1/G) sum_j (r_i - r_j) / sigma_g and drops the pairs whose members a
    fine-grained score q cannot tell apart:

        q_i   = reward column ``score_column`` (e.g. an LLM judge's quality score in [0, 1])
        m_ij  = 1[ |q_i - q_j| >= tau ]          (within 1e-6: rewards are float32)
        A_i   = (1/G) sum_{j in g} m_ij (r_i - r_j) / (sigma_g + eps)     sigma_g unbiased std of r in g

    r is the scalar reward (give the score column weight 0 if it should only gate pairs). Status:
    UNVERIFIED (spec objectives-wave2.md §2.16): only the abstract's mechanism ("fine-grained scoring
    to dynamically mask sample pairs with low distinctiveness") was read; the mask form, tau (suggested
    0.1 on a [0, 1] score) and the normaliser are covey's. The paper's second part (off-policy anchors
    for all-wrong groups) is a rollout strategy, not built.
    Edge cases: tau = 0 (all m_ij = 1) is exactly `grpo`; G = 1 or all rewards equal -> A = 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    q = _column(batch, score_column, "score_column", "dagrpo_provisional")
    same = _same_group(g)
    keep = same & ((q[:, None] - q[None, :]).abs() >= tau - TIE_TOL)
    sigma = g.std(r)[g.index]
    size = g.size[g.index]
    diff = torch.where(keep, r[:, None] - r[None, :], torch.zeros((), dtype=F64, device=r.device))
    adv = diff.sum(-1) / size / (sigma + eps)
    off_diag = same & ~torch.eye(len(r), dtype=torch.bool, device=r.device)
    masked = float((off_diag & ~keep).sum()) / max(float(off_diag.sum()), 1.0)
    return result("dagrpo_provisional", adv, batch, g, metrics={"masked_pair_frac": masked})
