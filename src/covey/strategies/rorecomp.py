"""`rorecomp_provisional`: rollout response recomposition for concise reasoning.

Paper: "RoRecomp: Enhancing Reasoning Efficiency via Rollout Response Recomposition in Reinforcement
Learning" (arXiv 2509.25958). RECONSTRUCTED: no code was released (searched); the abstract confirms two
kinds of batch, *priority* batches that combine short-correct and long-incorrect responses selected from the
online batch (a clear gradient signal for brevity, rewards unchanged) and *compensation* batches made of
the remaining responses, kept in a replay buffer (stability, against collapse). Covey's reading:

    online step:        the inner strategy's scored batch. Correct rows (scalar reward > `correct_above`)
                        are ranked by length, shortest first, incorrect rows longest first, over the whole
                        batch (`scope: batch`) or per group (`scope: group`); the first ceil(ratio x count)
                        of each list are the priority rows. The other rows leave the loss (completion mask
                        zeroed) and go to the replay buffer (FIFO, `buffer_rows`); every row keeps its
                        reward, so the advantage of a priority row is its whole group's (GRPO over G rows)
    compensation step:  every `compensation_every`-th step, when the buffer holds rows, no rollout: the
                        oldest buffered rows (up to the online batch's row count) are the batch, their
                        groups the rows left of each original group; their behaviour log-probs are those of
                        the policy that sampled them (the learner's ratio is an importance ratio)

What is not confirmed: the ranking scope, the ratio, the alternation and the buffer's size and order; the
compensation rows are off-policy (the strategy declares it carries rollouts across steps).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

from covey.rollouts import Rollouts
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, register_strategy

__all__ = ["RoRecomp", "priority_rows"]


def priority_rows(correct: torch.Tensor, lengths: torch.Tensor, groups: torch.Tensor, ratio: float, scope: str) -> torch.Tensor:
    """[N] bool: the short-correct and long-incorrect rows (module docstring). Ties keep row order."""
    keep = torch.zeros(len(correct), dtype=torch.bool)
    units = [torch.arange(len(correct))] if scope == "batch" else [torch.nonzero(groups == g).flatten() for g in torch.unique(groups)]
    for rows in units:
        for want, sign in ((True, 1), (False, -1)):
            cand = rows[correct[rows] == want]
            if not len(cand):
                continue
            order = cand[torch.argsort(sign * lengths[cand], stable=True)]
            keep[order[: math.ceil(ratio * len(cand))]] = True
    return keep


@register_strategy(
    "rorecomp_provisional",
    paper="RoRecomp: Enhancing Reasoning Efficiency via Rollout Response Recomposition in Reinforcement Learning",
    arxiv="2509.25958",
)  # fmt: skip
class RoRecomp:
    """RoRecomp's priority and compensation batches around `inner` (module docstring).

    inner, inner_params:  the strategy that rolls out (default `group`).
    ratio:                the fraction of correct rows (shortest) and of incorrect rows (longest) kept.
    scope:                rank over the whole batch or within each group.
    compensation_every:   every k-th step trains on buffered rows instead (0: never).
    buffer_rows:          the replay buffer's capacity in rows (the oldest leave first).
    correct_above:        a row is correct when its scalar reward is above this.
    """

    @staticmethod
    def inner_strategy(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return params.get("inner", "group"), params.get("inner_params") or {}

    caps = StrategyCaps(inner=inner_strategy, carries_rollouts=True, requires=("!single_rows",))

    def __init__(self, *, inner: str = "group", inner_params: dict[str, Any] | None = None, ratio: float = 0.5,
                 scope: Literal["batch", "group"] = "batch", compensation_every: int = 4, buffer_rows: int = 1024,
                 correct_above: float = 0.5):  # fmt: skip
        if not 0.0 < ratio <= 1.0 or compensation_every < 0 or buffer_rows < 1:
            raise ValueError(f"rorecomp_provisional: need 0 < ratio <= 1, compensation_every >= 0, buffer_rows >= 1 (got "
                             f"{ratio}, {compensation_every}, {buffer_rows})")  # fmt: skip
        if inner == "rorecomp_provisional":
            raise ValueError("rorecomp_provisional cannot wrap itself; give inner: group (or another strategy)")
        self.inner = STRATEGIES.build(inner, inner_params or {})
        self.ratio, self.scope, self.every, self.cap, self.threshold = ratio, scope, compensation_every, buffer_rows, correct_above
        self.buffer: Rollouts | None = None
        self.steps = 0
        self.offset = 0  # group ids of buffered rows stay unique across steps

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        self.steps += 1
        width = len(items) * max((d.n for d in ctx.draws), default=1)
        if self.every and self.steps % self.every == 0 and self.buffer is not None and len(self.buffer):
            take = min(width, len(self.buffer))
            out = self.buffer.select(torch.arange(take))
            self.buffer = self.buffer.select(torch.arange(take, len(self.buffer))) if take < len(self.buffer) else None
            _, out.group = torch.unique(out.group, return_inverse=True)
            return out, {"rorecomp/compensation": 1.0, "rorecomp/buffer_rows": float(len(self.buffer or []))}
        batch, metrics = self.inner.rollout(items, ctx)
        metrics = dict(metrics)
        if batch.rewards is None:
            metrics.update(ctx.score(batch))
        lengths = batch.lengths
        correct = batch.scalar_rewards() > self.threshold
        keep = priority_rows(correct, lengths, batch.group, self.ratio, self.scope)
        rest = batch.select(~keep)
        _, rest.group = torch.unique(rest.group, return_inverse=True)
        rest.group = rest.group + self.offset
        self.offset += len(batch)
        if len(rest):
            self.buffer = rest if self.buffer is None else Rollouts.concat([self.buffer, rest])
            if len(self.buffer) > self.cap:  # FIFO: the oldest rows leave
                self.buffer = self.buffer.select(torch.arange(len(self.buffer) - self.cap, len(self.buffer)))
        batch.completion_mask = batch.completion_mask * keep[:, None].to(batch.completion_mask.dtype)
        lf = lengths.double()
        metrics.update({
            "rorecomp/compensation": 0.0, "rorecomp/priority_frac": float(keep.double().mean()),
            "rorecomp/online_length_mean": float(lf.mean()),
            "rorecomp/priority_correct_length": float(lf[keep & correct].mean()) if bool((keep & correct).any()) else 0.0,
            "rorecomp/buffer_rows": float(len(self.buffer) if self.buffer is not None else 0),
        })  # fmt: skip
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "buffer": self.buffer, "steps": self.steps, "offset": self.offset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = state or {}
        self.inner.load_state_dict(state.get("inner", {}))
        self.buffer, self.steps, self.offset = state.get("buffer"), int(state.get("steps", 0)), int(state.get("offset", 0))

