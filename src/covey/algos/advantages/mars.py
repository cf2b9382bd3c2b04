"""MARS: turn-level advantages with agent-specific normalisation, for self-play in multi-turn games.

Paper: "MARS: Reinforcing Multi-Agent Reasoning of LLMs through Self-Play in Strategic Games" (released
as MARSHAL, arXiv 2510.15414). Status CODE: checked against thu-nics/MARSHAL 2db0222 (ROLL fork:
`roll/utils/functionals.py` `reward_postprocess_agentic` + `reward_normalize_by_player` +
`score_normalize`, `compute_advantage` with `compute_reinforce_return` and
`normalize_unique_values_by_player`; `roll/pipeline/agentic/agentic_pipeline.py`; the self-play config
`examples/tictactoe/agentic_val_tictactoe_selfplay.yaml`: use_turn_scores, reward_normalization
{grouping: tags, method: mean, separate_norm_for_selfplay: true}, whiten_rewards, advantage_norm mean,
whiten_advantages, gamma 1).

Each turn t of role p has its reward r_t (the turn's score, MARS's turn-level reward; the opponent's
reward for a game's last move is credited to the player's last turn by the env). Per role p:

    1. r~ = r - mean_p(r)                 mean over every turn of role p in the batch (reward_norm mean;
                                          mean_std: (r - mean) / (std + 1e-6), 0 when std <= 1e-6)
    2. R_t = sum_{k >= t} gamma^(k-t) r~_k over the role's own later turns in the episode (turn-level return)
    3. A = R - mean(U_p), U_p = the distinct values of {0} and every R of role p (advantage_norm mean; the
       code normalises the distinct values of the player's token tensor, whose padding is always 0;
       mean_std divides by their std + 1e-6; one distinct value, or std 0: A = 0)
    4. A = (A - mu) * rsqrt(var + 1e-8) over the trained tokens (var unbiased; `masked_whiten`)

The code's `whiten_rewards` (a token-level whitening of r~ before step 2) is left out: the r~ of each
role sum to zero, so it only rescales every return by one number, which steps 3 and 4 undo (up to its
1e-8). The code whitens step 4 over the whole batch (`whiten: batch`); covey's default whitens each
role over its own tokens (`whiten: role`), so that one role's advantages never depend on another's
rewards (a global whitening shifts and scales every role by the whole batch's statistics). The code
discounts per token; covey per turn (the default gamma 1 makes them equal). `grouping: batch` is the
code's ``tags`` grouping for a run of one game; `group` normalises within each item's games.
Needs role-labelled turns: `Rollouts.step_agents` from the `selfplay` strategy (feature `roles`).
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result
from covey.algos.advantages._steps import step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["mars", "unique_value_norm"]


def unique_value_norm(values: list[float], mode: str) -> dict[float, float]:
    """MARS's `normalize_unique_values`: {value: normalised value} over the distinct values of `values`
    with 0 added (mean: u - mean(u); mean_std: (u - mean) / (std(u) + 1e-6), unbiased std); a single
    distinct value or std 0 maps everything to 0."""
    u = torch.unique(torch.tensor([0.0, *values], dtype=F64))
    if u.numel() == 1 or float(u.std()) == 0.0:
        return {float(x): 0.0 for x in u}
    out = u - u.mean() if mode == "mean" else (u - u.mean()) / (u.std() + 1e-6)
    return dict(zip(u.tolist(), out.tolist()))


@register_advantage("mars", requires=("roles",), paper="MARS: Reinforcing Multi-Agent Reasoning of LLMs through Self-Play "
                    "in Strategic Games (MARSHAL, CODE)", arxiv="2510.15414")  # fmt: skip
def mars(
    batch: Rollouts,
    *,
    reward_norm: Literal["mean", "mean_std", "identity"] = "mean",
    grouping: Literal["batch", "group"] = "batch",
    gamma: NonNegFloat = 1.0,
    advantage_norm: Literal["mean", "mean_std", "none"] = "mean",
    whiten: Literal["role", "batch", "none"] = "role",
) -> AdvantageResult:
    """MARS turn-level advantage with agent-specific normalisation ([N, T]; module docstring)."""
    st = step_table(batch, "mars")
    g = groups_of(batch)
    agents = [list(batch.step_agents[i]) if batch.step_agents is not None else [0] * len(r)
              for i, r in zip(st.rows, st.rewards)]  # fmt: skip
    # 1. reward normalisation per (grouping, role) over turns
    pools: dict[tuple, list[tuple[int, int]]] = {}
    for j, r in enumerate(st.rewards):
        for t in range(len(r)):
            pools.setdefault((st.group[j] if grouping == "group" else 0, agents[j][t]), []).append((j, t))
    shaped = [list(r) for r in st.rewards]
    for members in pools.values():
        x = torch.tensor([st.rewards[j][t] for j, t in members], dtype=F64)
        if reward_norm == "identity":
            continue
        std = x.std() if len(members) > 1 else torch.zeros((), dtype=F64)
        y = x - x.mean() if reward_norm == "mean" else ((x - x.mean()) / (std + 1e-6) if std > 1e-6 else torch.zeros_like(x))
        for (j, t), v in zip(members, y.tolist()):
            shaped[j][t] = v
    # 2. turn-level return over each role's own later turns of the episode
    returns = [[0.0] * len(r) for r in st.rewards]
    for j, r in enumerate(shaped):
        running: dict[int, float] = {}
        for t in reversed(range(len(r))):
            a = agents[j][t]
            running[a] = r[t] + gamma * running.get(a, 0.0)
            returns[j][t] = running[a]
    # 3. per role: the distinct returns (and 0) mean-shifted
    values = [list(r) for r in returns]
    if advantage_norm != "none":
        for a in sorted({x for ag in agents for x in ag}):
            table = unique_value_norm([returns[j][t] for j in range(len(returns)) for t in range(len(returns[j]))
                                       if agents[j][t] == a], advantage_norm)  # fmt: skip
            for j in range(len(values)):
                for t in range(len(values[j])):
                    if agents[j][t] == a:
                        values[j][t] = table[returns[j][t]]
    adv = to_tokens(batch, st, values)
    # 4. token-level whitening: per role, over the batch, or none
    if whiten != "none":
        role = to_tokens(batch, st, [[float(a + 1) for a in ag] for ag in agents]).round().long() - 1  # -1 off turns
        mask = (batch.completion_mask > 0) & (role >= 0)
        for a in (sorted(set(role[mask].tolist())) if whiten == "role" else [None]):
            m = mask if a is None else mask & (role == a)
            adv = torch.where(m, _whiten(adv, m), adv)
    n_roles = len({x for ag in agents for x in ag})
    return result("mars", adv, batch, g, metrics={"roles": float(n_roles)})


def _whiten(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ROLL's `masked_whiten` over the tokens `m` of `x`: (x - mean) * rsqrt(var + 1e-8), var with Bessel's factor."""
    n = m.sum()
    if n == 0:
        return x
    mean = x[m].mean()
    var = ((x[m] - mean) ** 2).sum() / n
    if n > 1:
        var = var * n / (n - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)
