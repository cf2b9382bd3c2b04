"""Shared by the step-level estimators (gigpo, hgpo, salt, empg): the step table of a batch of
multi-turn episodes and the broadcast of per-step values back onto each step's tokens.

Both layouts of the `episodes` strategy are read the same way: an episode is the set of rows with
one `Rollouts.episode` id (layout concat: one row; per_step: one row per turn; no `episode` field:
each row its own episode); `step_rewards` / `step_anchors` of any of its rows are the episode's
lists (one entry per turn), and `turn` [N, T] says which turn each token belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from covey.rollouts import Rollouts, RolloutsError

__all__ = ["Steps", "discounted_returns", "hashable", "step_table", "to_tokens", "turn_mean", "turn_tokens"]


@dataclass
class Steps:
    """Episodes j = 0..E-1 in order of first appearance: `rows[j]` its first row, `group[j]`,
    `score[j]` (the scalar reward of that row: the episode's outcome), `rewards[j]` / `anchors[j]`
    (per turn), and `index[i]` = the episode of row i."""

    rows: list[int]
    group: list[int]
    score: list[float]
    rewards: list[list[float]]
    anchors: list[list]
    index: list[int]


def step_table(batch: Rollouts, method: str) -> Steps:
    """The episodes of a batch; a clear error when it does not come from multi-turn episodes."""
    if batch.turn is None or batch.step_rewards is None or batch.step_anchors is None:
        raise RolloutsError(f"advantage {method!r} needs multi-turn episodes (Rollouts.turn, step_rewards, "
                            "step_anchors): use rollout.strategy: episodes with an env")  # fmt: skip
    ids = batch.episode.tolist() if batch.episode is not None else list(range(len(batch)))
    first: dict[int, int] = {}
    index = [first.setdefault(e, len(first)) for e in ids]
    rows = [ids.index(e) for e in first]
    score = batch.scalar_rewards().tolist()
    return Steps(rows=rows, group=[int(batch.group[i]) for i in rows], score=[score[i] for i in rows],
                 rewards=[[float(x) for x in batch.step_rewards[i]] for i in rows],
                 anchors=[list(batch.step_anchors[i]) for i in rows], index=index)  # fmt: skip


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """R_t = r_t + gamma * R_{t+1}, backwards over one episode (GiGPO Eq. 5)."""
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def hashable(x):
    """verl-agent's `to_hashable`: lists, tuples and dicts become (sorted) tuples; None stays None."""
    if x is None or isinstance(x, (int, float, str, bool)):
        return x
    if isinstance(x, (list, tuple)):
        return tuple(hashable(e) for e in x)
    if isinstance(x, dict):
        return tuple(sorted((k, hashable(v)) for k, v in x.items()))
    if isinstance(x, Tensor):
        return tuple(x.flatten().tolist())
    try:
        hash(x)
    except TypeError:
        raise RolloutsError(f"step anchor of type {type(x).__name__} is not hashable") from None
    return x


def to_tokens(batch: Rollouts, steps: Steps, values: list[list[float]]) -> Tensor:
    """[N, T] float64: values[j][t] on the tokens of episode j's turn t, 0 on env tokens and padding."""
    n, t = batch.completion_ids.shape
    out = torch.zeros(n, t, dtype=torch.float64)
    for i in range(n):
        v = values[steps.index[i]]
        if not v:
            continue
        turn = batch.turn[i].cpu()
        vals = torch.tensor(v, dtype=torch.float64)
        out[i] = torch.where(turn >= 0, vals[turn.clamp(min=0, max=len(v) - 1)], torch.zeros(()))
    return out.to(batch.completion_ids.device)


def turn_tokens(batch: Rollouts, steps: Steps) -> list[list[tuple[int, ...]]]:
    """The sampled token ids of every step: result[j][t] (whichever row holds the turn)."""
    out = [[() for _ in r] for r in steps.rewards]
    for i in range(len(batch)):
        turn, ids = batch.turn[i].tolist(), batch.completion_ids[i].tolist()
        for t in sorted(set(turn) - {-1}):
            out[steps.index[i]][t] = tuple(x for x, s in zip(ids, turn) if s == t)
    return out


def turn_mean(batch: Rollouts, steps: Steps, values: Tensor) -> list[list[float]]:
    """The mean of a [N, T] tensor over each step's tokens: result[j][t]."""
    out = [[0.0 for _ in r] for r in steps.rewards]
    for i in range(len(batch)):
        turn = batch.turn[i].cpu()
        for t in sorted(set(turn.tolist()) - {-1}):
            out[steps.index[i]][t] = float(values[i].cpu().to(torch.float64)[turn == t].mean())
    return out
