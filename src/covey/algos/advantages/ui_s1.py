"""UI-S1's advantage: step scores normalised over the group's steps plus discounted future returns
normalised over the steps at the same position. Paper: "UI-S1: Advancing GUI Automation via Semi-online
Reinforcement Learning" (arXiv 2509.11543). Status CODE: checked against X-PLUG/MobileAgent f7702e4
(`UI-S1/uis1/core_uis1.py`: `compute_step_discounted_returns`, `episode_norm_reward`, `step_norm_reward`,
`compute_uis1_outcome_advantage`; `UI-S1/scripts/train_example.sh`: gamma 0.5, mode mean_std_norm,
step_advantage_w 1.0).

Each turn t of an episode has its step score r_t (the env's step reward; UI-S1's action-match score)
and whether its action was valid (`Rollouts.step_valid`; UI-S1's ``extract_match``: a mismatched action
is patched with the expert's and is invalid):

    R_t = r_t + gamma * R_{t+1}         a valid turn (R after the last turn is 0)
    R_t = r_t, and the sum restarts     an invalid turn: nothing after it reaches the turns before it
    A_ep(t)   = (r_t - mean) / (std + eps)   over EVERY turn of every episode of the group (the code's
                compute_mean_std_cross_all_data: True); a group with one turn: mean 0, std 1
    A_step(t) = (R_t - mean) / (std + eps)   over the group's turns at position t; alone: mean R_t (0)
    A(t)      = episode_weight * A_ep(t) + step_weight * A_step(t)

std is the unbiased one (torch.std); mode mean_norm drops the division. Values go on each turn's tokens
([N, T]); a batch without `step_valid` counts every turn valid.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result
from covey.algos.advantages._steps import step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["semi_online_returns", "ui_s1"]


def semi_online_returns(rewards: list[float], valid: list[bool], gamma: float) -> list[float]:
    """UI-S1's discounted returns of one episode: the running sum restarts at an invalid turn.

    >>> semi_online_returns([1.0, 1.0, 0.1, 1.0], [True, True, False, True], 0.5)
    [1.5, 1.0, 0.1, 1.0]
    """
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        if valid[t]:
            running = rewards[t] + gamma * running
            out[t] = running
        else:
            running = 0.0
            out[t] = rewards[t]
    return out


def _normalise(values: list[float], alone_mean_zero: bool, std_norm: bool, epsilon: float) -> list[float]:
    x = torch.tensor(values, dtype=F64)
    if len(values) == 1:
        mean, std = (torch.zeros((), dtype=F64) if alone_mean_zero else x.mean()), torch.ones((), dtype=F64)
    else:
        mean, std = x.mean(), x.std()
    return ((x - mean) / (std + epsilon) if std_norm else x - mean).tolist()


@register_advantage("ui_s1", group_relative=True, paper="UI-S1: Semi-online Reinforcement Learning (CODE)", arxiv="2509.11543")
def ui_s1(batch: Rollouts, *, gamma: NonNegFloat = 0.5, mode: Literal["mean_std_norm", "mean_norm"] = "mean_std_norm",
          step_weight: float = 1.0, episode_weight: float = 1.0, epsilon: NonNegFloat = 1e-6) -> AdvantageResult:  # fmt: skip
    """Step-score + discounted-return advantages of semi-online episodes ([N, T]; module docstring)."""
    st = step_table(batch, "ui_s1")
    g = groups_of(batch)
    valid = [list(batch.step_valid[i]) if batch.step_valid is not None else [True] * len(st.rewards[j])
             for j, i in enumerate(st.rows)]  # fmt: skip
    returns = [semi_online_returns(r, v, gamma) for r, v in zip(st.rewards, valid)]
    std_norm = mode == "mean_std_norm"
    ep = [[0.0] * len(r) for r in st.rewards]
    step = [[0.0] * len(r) for r in st.rewards]
    by_group: dict[int, list[tuple[int, int]]] = {}
    by_position: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for j, r in enumerate(st.rewards):
        for t in range(len(r)):
            by_group.setdefault(st.group[j], []).append((j, t))
            by_position.setdefault((st.group[j], t), []).append((j, t))
    for members in by_group.values():
        for (j, t), v in zip(members, _normalise([st.rewards[j][t] for j, t in members], True, std_norm, epsilon)):
            ep[j][t] = v
    for members in by_position.values():
        for (j, t), v in zip(members, _normalise([returns[j][t] for j, t in members], False, std_norm, epsilon)):
            step[j][t] = v
    values = [[episode_weight * a + step_weight * b for a, b in zip(ea, sa)] for ea, sa in zip(ep, step)]
    invalid = sum(not x for v in valid for x in v) / max(sum(len(v) for v in valid), 1)
    return result("ui_s1", to_tokens(batch, st, values), batch, g, metrics={"invalid_turn_frac": invalid})
