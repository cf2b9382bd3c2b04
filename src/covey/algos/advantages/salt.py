"""SALT: step-level advantages from a trajectory graph of the group's episodes.

Paper: SALT, step-level advantages via a trajectory graph, arXiv 2510.20022 (Amazon; the full title
was not checked). Status RECONSTRUCTED (the idea is
confirmed by the abstract, the formula is UNVERIFIED; no code was read): identical steps
(same history of (anchor, action) pairs) of one group are merged into one graph edge, and each step
gets the mean outcome advantage of the episodes passing through its edge, so steps shared by good
and bad episodes get ~0 and the decisive steps keep their episode's advantage.
"""

from __future__ import annotations

from typing import Literal

from covey.algos.advantages._groups import NonNegFloat, groups_of, result
from covey.algos.advantages._steps import hashable, step_table, to_tokens, turn_tokens
from covey.algos.advantages.grpo import grpo, rloo
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["salt"]


@register_advantage("salt", group_relative=True, paper="SALT: step-level advantage via trajectory graph (RECONSTRUCTED)", arxiv="2510.20022")
def salt(batch: Rollouts, *, outcome: Literal["grpo", "rloo"] = "grpo", eps: NonNegFloat = 1e-6) -> AdvantageResult:
    """A(step t of episode i) = mean of A(tau_j) over the episodes j of i's group whose first t+1 steps
    equal i's (same anchors and same sampled token ids), on that step's tokens ([N, T]).

    A(tau) is the `outcome` estimator over episodes (grpo: (r - mean) / (std + eps); rloo).
    """
    st = step_table(batch, "salt")
    g = groups_of(batch)
    episodes = batch.select(st.rows)  # one row per episode: the outcome advantage is per episode
    a_tau = (grpo(episodes, eps=eps) if outcome == "grpo" else rloo(episodes)).advantages.tolist()
    actions = turn_tokens(batch, st)
    keys: list[list[tuple]] = []
    for j, r in enumerate(st.rewards):
        hist, row = (st.group[j],), []
        for t in range(len(r)):
            hist = (*hist, (hashable(st.anchors[j][t]), actions[j][t]))
            row.append(hist)
        keys.append(row)
    through: dict[tuple, list[int]] = {}
    for j, row in enumerate(keys):
        for key in row:
            through.setdefault(key, []).append(j)
    values = [[sum(a_tau[k] for k in through[key]) / len(through[key]) for key in row] for row in keys]
    shared = sum(len(v) > 1 for v in through.values()) / max(len(through), 1)
    return result("salt", to_tokens(batch, st, values), batch, g, metrics={"shared_edge_frac": shared})
