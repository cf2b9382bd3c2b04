"""Advantages for self-play games (the `selfplay` strategy: role-labelled turns, `Rollouts.step_agents`):

    mars          MARS's turn-level returns with agent-specific normalisation (arXiv 2510.15414, CODE)
    self_redteam  Self-RedTeam's REINFORCE++ returns whitened per role (arXiv 2506.07468, CODE)

Both need the feature `roles` (a game of two roles or more), and both keep each role's advantages a
function of that role's own turns. Shared: the turn-level return over a role's own later turns of an
episode, and the token-level whitening per role.

mars: "MARS: Reinforcing Multi-Agent Reasoning of LLMs through Self-Play in Strategic Games" (released
as MARSHAL, arXiv 2510.15414). Checked against thu-nics/MARSHAL 2db0222 (ROLL fork:
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

self_redteam: "Chasing Moving Targets with Online Self-Play Reinforcement Learning for Safer Language
Models" (Self-RedTeam, arXiv 2506.07468). Checked against mickelliu/selfplay-redteaming 0c56e50: its
OpenRLHF `--advantage_estimator reinforce` (`experience_maker.py`: the return of each token is the sum
of the rewards after it, gamma 1), then `ppo_actor.py` normalises the advantages per game role
(`replay_buffer.normalize(role="attacker")`, then "defender"): over the role's action tokens,
A = (R - mean) * rsqrt(max(var, 1e-8)) with the population variance. The code adds the KL penalty to the
reward (init_kl_coef 0.01); covey applies no reward-side KL to episodes (use `algo.kl` in the loss).
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result
from covey.algos.advantages._steps import step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["mars", "role_returns", "self_redteam", "unique_value_norm"]


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
    agents = _agents(batch, st)
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
    returns = role_returns(shaped, agents, gamma)  # 2. turn-level return over each role's own later turns
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
    if whiten != "none":  # 4. token-level whitening: per role, or over the batch
        adv = _whiten_roles(adv, batch, st, agents, per_role=whiten == "role", unbiased=True)
    return result("mars", adv, batch, g, metrics={"roles": float(len({x for ag in agents for x in ag}))})


@register_advantage("self_redteam", requires=("roles",), paper="Chasing Moving Targets with Online Self-Play Reinforcement "
                    "Learning for Safer Language Models (Self-RedTeam, CODE)", arxiv="2506.07468")  # fmt: skip
def self_redteam(batch: Rollouts) -> AdvantageResult:
    """Self-RedTeam's REINFORCE++ with per-role normalisation ([N, T]; module docstring): each turn's return
    R_t = sum of the role's rewards from t on in the episode, then (R - mean) * rsqrt(max(var, 1e-8)) over
    each role's tokens, population variance."""
    st = step_table(batch, "self_redteam")
    agents = _agents(batch, st)
    adv = to_tokens(batch, st, role_returns(st.rewards, agents, 1.0))
    adv = _whiten_roles(adv, batch, st, agents, per_role=True, unbiased=False)
    return result("self_redteam", adv, batch, groups_of(batch), metrics={"roles": float(len({x for ag in agents for x in ag}))})


def role_returns(rewards: list[list[float]], agents: list[list[int]], gamma: float) -> list[list[float]]:
    """R_t = r_t + gamma R_t' per episode, t' the next turn of the same role (each role's own return).

    >>> role_returns([[1.0, 2.0, 4.0]], [[0, 1, 0]], 0.5)
    [[3.0, 2.0, 4.0]]
    """
    out = [[0.0] * len(r) for r in rewards]
    for j, r in enumerate(rewards):
        running: dict[int, float] = {}
        for t in reversed(range(len(r))):
            a = agents[j][t]
            running[a] = r[t] + gamma * running.get(a, 0.0)
            out[j][t] = running[a]
    return out


def _agents(batch: Rollouts, st) -> list[list[int]]:
    """The role of each turn of each episode (0 when the batch has no step_agents)."""
    if batch.step_agents is None:
        return [[0] * len(r) for r in st.rewards]
    return [list(batch.step_agents[i]) for i in st.rows]


def _whiten_roles(adv: torch.Tensor, batch: Rollouts, st, agents: list[list[int]], *, per_role: bool, unbiased: bool) -> torch.Tensor:
    """Whiten [N, T] `adv` over the trained tokens of each role (`per_role`) or of all: ROLL's `masked_whiten`
    (unbiased var, rsqrt(var + 1e-8)) or OpenRLHF's `normalize` (population var, rsqrt(max(var, 1e-8)))."""
    role = to_tokens(batch, st, [[float(a + 1) for a in ag] for ag in agents]).round().long() - 1  # -1 off turns
    mask = (batch.completion_mask > 0) & (role >= 0)
    for a in (sorted(set(role[mask].tolist())) if per_role else [None]):
        m = mask if a is None else mask & (role == a)
        n = m.sum()
        if n == 0:
            continue
        mean = adv[m].mean()
        var = ((adv[m] - mean) ** 2).sum() / n
        if unbiased:
            scale = torch.rsqrt((var * n / (n - 1) if n > 1 else var) + 1e-8)
        else:
            scale = torch.rsqrt(var.clamp(min=1e-8))
        adv = torch.where(m, (adv - mean) * scale, adv)
    return adv
