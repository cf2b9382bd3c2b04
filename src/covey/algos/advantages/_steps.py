"""Shared by the step-level estimators (gigpo, hgpo, salt, empg): the step table of a batch of
multi-turn episodes (`Rollouts.turn`, `step_rewards`, `step_anchors`; layout concat: one row per
episode) and the broadcast of per-step values back onto each step's tokens."""

from __future__ import annotations

import torch
from torch import Tensor

from covey.rollouts import Rollouts, RolloutsError

__all__ = ["discounted_returns", "hashable", "step_table", "to_tokens"]


def step_table(batch: Rollouts, method: str) -> list[list[float]]:
    """The env reward of every step, per row (row i has len(result[i]) turns); a clear error when the
    batch does not come from multi-turn episodes."""
    if batch.turn is None or batch.step_rewards is None or batch.step_anchors is None:
        raise RolloutsError(f"advantage {method!r} needs multi-turn episodes (Rollouts.turn, step_rewards, "
                            "step_anchors): use rollout.strategy: episodes with an env")  # fmt: skip
    return [[float(x) for x in r] for r in batch.step_rewards]


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


def to_tokens(batch: Rollouts, values: list[list[float]]) -> Tensor:
    """[N, T] float64: values[i][t] on the tokens of row i's turn t, 0 on env tokens and padding."""
    n, t = batch.completion_ids.shape
    out = torch.zeros(n, t, dtype=torch.float64)
    for i, v in enumerate(values):
        if not v:
            continue
        turn = batch.turn[i].cpu()
        vals = torch.tensor(v, dtype=torch.float64)
        out[i] = torch.where(turn >= 0, vals[turn.clamp(min=0, max=len(v) - 1)], torch.zeros(()))
    return out.to(batch.completion_ids.device)
