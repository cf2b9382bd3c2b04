"""PORTool: step rewards on a tree of tool-call trajectories, fork-relative + trajectory-relative advantages.

Paper: "PORTool: Tool-Use LLM Training with Rewarded Tree" (arXiv 2510.26020). RECONSTRUCTED (hence
`_provisional`): no code was released and only the abstract and summaries could be read. What they say:
a step's reward comes from whether its descendants produce a correct answer (correctness-dominant) plus
whether its tool calls succeed; a step shared by several trajectories gets one reward, steps under one
fork get different ones; fork-relative advantages are blended with trajectory-relative ones. As built
(the trajectories from the `tool_tree` strategy, `Rollouts.tree_path`: one node per turn):

    R(s)       = mean of the outcomes r_j of the trajectories through step s (its share of correct
                 descendants for 0/1 outcomes: `branch_node_values`, covey.algos.advantages.tree)
                 + tool_weight * [every tool call of s succeeded] (the transcript's tool_errors, 0 -> 1)
    A_fork(s)  = (R(s) - mean_C R) / (std_C R + eps) over the steps C under the same parent (the siblings
                 of the fork, the first steps of the group for step 0; unbiased std; one sibling -> 0;
                 fork_norm mean: R(s) - mean_C R)
    A_traj(j)  = (r_j - mean_g r) / (std_g r + eps) over the group's n trajectories (GRPO)
    A(s_{j,t}) = A_traj(j) + fork_weight * A_fork(s_{j,t})        on the tokens of turn t of trajectory j

The blend (a sum, weight 1), the tool term's weight (0.1) and the normalisations are choices.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, group_normalise, groups_of, result
from covey.algos.advantages._steps import step_table, to_tokens
from covey.algos.advantages.tree import branch_node_values
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Groups, Rollouts, RolloutsError

__all__ = ["portool_provisional", "step_tool_ok"]


def step_tool_ok(item: dict | None, turns: int) -> list[float]:
    """1.0 for each assistant turn of the row's transcript whose tool calls all succeeded (or that made
    none), 0.0 for one with a tool error; 1.0 everywhere when the transcript does not say."""
    said = [m for m in (item or {}).get("transcript", []) if m.get("role") == "assistant"]
    return [0.0 if t < len(said) and said[t].get("tool_errors", 0) > 0 else 1.0 for t in range(turns)]


@register_advantage("portool_provisional", group_relative=True, requires=("tree_path",),
                    paper="PORTool: Tool-Use LLM Training with Rewarded Tree (RECONSTRUCTED)", arxiv="2510.26020")  # fmt: skip
def portool_provisional(
    batch: Rollouts,
    *,
    fork_weight: NonNegFloat = 1.0,
    tool_weight: NonNegFloat = 0.1,
    fork_norm: Literal["mean_std", "mean"] = "mean_std",
    eps: NonNegFloat = 1e-6,
) -> AdvantageResult:
    """PORTool step advantages on a tool-call tree ([N, T]; module docstring)."""
    st = step_table(batch, "portool_provisional")
    if batch.tree_path is None:
        raise RolloutsError("advantage 'portool_provisional' needs Rollouts.tree_path (rollout.strategy tool_tree)")
    g = groups_of(batch)
    paths = [tuple(batch.tree_path[i]) for i in st.rows]
    for j, (p, r) in enumerate(zip(paths, st.rewards)):
        if len(p) != len(r):
            raise RolloutsError(f"portool_provisional: episode {j} has {len(r)} turns but a tree path of {len(p)} nodes "
                                "(rollout.strategy tool_tree gives one node per turn)")  # fmt: skip
    value = branch_node_values(paths, st.group, st.score)  # {(group,) + prefix: mean outcome of its leaves}
    step: dict[tuple, float] = {}  # node -> R(s)
    for j, p in enumerate(paths):
        ok = step_tool_ok(batch.items[st.rows[j]] if batch.items is not None else None, len(p))
        for t in range(len(p)):
            node = (st.group[j],) + p[: t + 1]
            step[node] = value[node] + tool_weight * ok[t]
    siblings: dict[tuple, list[tuple]] = {}
    for node in step:
        siblings.setdefault(node[:-1], []).append(node)
    fork: dict[tuple, float] = {}
    for kids in siblings.values():
        x = torch.tensor([step[k] for k in kids], dtype=F64)
        if len(kids) == 1:
            a = torch.zeros(1, dtype=F64)
        else:
            a = x - x.mean() if fork_norm == "mean" else (x - x.mean()) / (x.std() + eps)
        fork.update(zip(kids, a.tolist()))
    traj = group_normalise(torch.tensor(st.score, dtype=F64), Groups.of(torch.tensor(st.group)), eps=eps, scale="group",
                           singleton="zero").tolist()  # fmt: skip
    values = [[traj[j] + fork_weight * fork[(st.group[j],) + p[: t + 1]] for t in range(len(p))] for j, p in enumerate(paths)]
    forks = [len(k) for k in siblings.values()]
    metrics = {"forks_branching_frac": sum(k > 1 for k in forks) / max(len(forks), 1),
               "step_reward_mean": sum(step.values()) / max(len(step), 1)}  # fmt: skip
    return result("portool_provisional", to_tokens(batch, st, values), batch, g, metrics=metrics)
