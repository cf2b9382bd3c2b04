"""Dr. MAS: per-agent advantage normalisation for multi-agent episodes.
Paper: "Dr. MAS" (arXiv 2602.08847). Status CODE: checked against langfengQ/DrMAS 19c632b
(`verl/trainer/ppo/ray_trainer.py` `compute_advantage` with ``group_by_agent_id``: the group index
is ``f"{uid}_{agent_id}"``; `verl/trainer/ppo/core_algos.py` `compute_grpo_outcome_advantage`).

In the code every row is one agent call (one turn) and carries its episode's outcome reward; with
``group_by_agent_id`` the rows are grouped by (prompt uid, agent id) and EVERY row of the key counts
(an agent that acted k times in an episode counts k times: ``id2score[idx].extend(reward_list)``),
then A = (R - mean) / (std + eps) with the unbiased std (torch.std), or R - mean without the std
(``norm_adv_by_std_in_grpo: false``); a key with one row gets mean 0 and std 1 (A = R / (1 + eps)).
So each agent's turns are normalised with that agent's own reward statistics within the group.

covey reads the agent of each turn from `Rollouts.step_agents` (the env's ``info["agent"]``; None:
agent 0 everywhere, which makes this GRPO over turns) and works in both layouts of the `episodes`
strategy (a concat row holds several agents' turns: each turn's tokens get its own value).
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result
from covey.algos.advantages._steps import step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["dr_mas"]


@register_advantage("dr_mas", group_relative=True, paper="Dr. MAS: per-agent normalisation for multi-agent RL (CODE)",
                    arxiv="2602.08847")  # fmt: skip
def dr_mas(batch: Rollouts, *, norm_std: bool = True, epsilon: NonNegFloat = 1e-6) -> AdvantageResult:
    """Per-agent GRPO over turns ([N, T]): each turn of agent a in group g gets (R - mean_{g,a}) /
    (std_{g,a} + epsilon), R its episode's scalar reward, the statistics over every turn of agent a
    in the group's episodes (unbiased std; a one-turn key: mean 0, std 1); `norm_std` false: R - mean."""
    st = step_table(batch, "dr_mas")
    g = groups_of(batch)
    agents = _agents(batch, st)
    keys: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for j, r in enumerate(st.rewards):
        for t in range(len(r)):
            keys.setdefault((st.group[j], agents[j][t]), []).append((j, t))
    values = [[0.0] * len(r) for r in st.rewards]
    for members in keys.values():
        x = torch.tensor([st.score[j] for j, _ in members], dtype=F64)
        mean, std = (x.mean(), x.std()) if len(members) > 1 else (torch.zeros((), dtype=F64), torch.ones((), dtype=F64))
        a = (x - mean) / (std + epsilon) if norm_std else x - mean
        for (j, t), v in zip(members, a.tolist()):
            values[j][t] = v
    n_agents = len({k[1] for k in keys})
    return result("dr_mas", to_tokens(batch, st, values), batch, g, metrics={"agents": float(n_agents)})


def _agents(batch: Rollouts, st) -> list[list[int]]:
    """The agent of each turn of each episode (0 when the batch has no step_agents)."""
    if batch.step_agents is None:
        return [[0] * len(r) for r in st.rewards]
    return [list(batch.step_agents[i]) for i in st.rows]
