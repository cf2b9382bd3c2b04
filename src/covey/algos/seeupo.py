"""SeeUPO's turn-by-turn updates in reverse order (`algo.turn_updates`), arXiv 2602.06554. Status CODE:
checked against modelscope/AgentEvolver e59dea4 (branch seeupo), `beyondagent/module/trainer/ba_ray_trainer.py`
(`fit`'s ``sequential_update`` loop, `get_agent_update_order`, `update_ratios`, `compute_advantage`'s
``ratios``; `launcher/qwen3_bfcl/qwen3-seeupo-bfcl.yaml`: update_order reverse, adv_updator seeupo,
adv_clip_ratio_low / high 0.2).

A multi-turn episode is a chain of single-turn bandits, one "virtual agent" per turn; the policy is
updated one turn at a time, last turn first (backward induction), each turn's advantage scaled by how
much the updates of the later turns changed the policy on those later turns:

    for k in T-1, ..., 0 (order reverse; sequential: 0, ..., T-1):
        rows  = the rows holding tokens of turn k; their loss tokens restricted to turn k
        pi_old = the policy now (after the updates of the turns before k in this order), recomputed
        A_i  <- A_i * rho_i                         rho_i of row i's episode (1 before the first update)
        one optimizer step on these rows (split into `optim.mini_batches` steps)
        r_i  = clamp(exp(clamp(mean_t (log pi_new - log pi_old) over turn k's tokens, +-10)), 1 - lo, 1 + hi)
        rho_i <- clamp(rho_i * r_i, 1 - lo, 1 + hi)  (per episode; the code clips the product again)

The ratio is GSPO's sequence ratio (geometric mean over the turn's tokens), detached. Each epoch
(`optim.epochs`) runs the whole sweep again with rho reset to 1. Departures from the code, where the
code's turns are padded to `multi_turn.max_steps` for every trajectory: turns no row has are skipped (the
code steps the optimizer on an all-masked batch: with Adam that still moves the weights), and an
episode without a turn k keeps its rho (the code's padded row measures the change on its last turn).
A batch without turns (single-turn rows) is one turn: the ordinary update. `TurnSchedule` is a hook of the policy loss (`covey.learner.policy_loss`), called on every update and a
no-op without `algo.turn_updates`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from covey.rollouts import Rollouts

__all__ = ["TurnSchedule", "turn_ratio", "turn_rows"]


def turn_rows(turn: Tensor, mask: Tensor, order: str) -> list[tuple[int, Tensor]]:
    """(k, rows [CPU long]) for each turn k that has loss tokens, in update order.

    >>> turn_rows(torch.tensor([[0, 0, 1], [0, -1, -1]]), torch.ones(2, 3), "reverse")
    [(1, tensor([0])), (0, tensor([0, 1]))]
    """
    live = (mask > 0) & (turn >= 0)
    turns = sorted({int(k) for k in turn[live].tolist()}, reverse=order == "reverse")
    return [(k, torch.nonzero(((turn == k) & live).any(-1)).flatten().cpu()) for k in turns]


def turn_ratio(new: Tensor, old: Tensor, mask: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """[N] clamp(exp(clamp(mean over `mask` tokens of (new - old), +-10)), 1 - lo, 1 + hi): the code's
    `update_ratios` step (a row without tokens: 1).

    >>> turn_ratio(torch.tensor([[0.1, 0.3]]), torch.zeros(1, 2), torch.ones(1, 2), 0.2, 0.2)
    tensor([1.2000])
    """
    n = mask.sum(-1)
    log_r = (((new - old) * mask).sum(-1) / n.clamp(min=1)).clamp(-10.0, 10.0)
    r = torch.exp(log_r).clamp(1 - clip_low, 1 + clip_high)
    return torch.where(n > 0, r, torch.ones_like(r))


class TurnSchedule:
    """The policy loss's turn schedule (module docstring). `spec`: `algo.turn_updates`
    (`covey.algos.presets.TurnUpdatesSpec`: order, clip_low, clip_high, ratios) or None (every hook is
    the default)."""

    def __init__(self, spec=None):
        self.spec = spec
        self._turns: list[int] = []  # the turn of each optimizer step of the epoch
        self._rho: dict[int, float] = {}  # episode -> accumulated ratio
        self._prev: Rollouts | None = None  # the rows (with their pi_old) of the turn updated last
        self._prev_turn: int | None = None
        self._step = 0

    @property
    def active(self) -> bool:
        return self.spec is not None

    def mini_batches(self, learner, batch: Rollouts, generator, default) -> list[Tensor]:
        """One epoch's optimizer steps: `default()`, or turn by turn in the spec's order (each turn's rows
        split into `learner.mini_batches` random parts)."""
        self._turns, self._rho, self._prev, self._prev_turn, self._step = [], {}, None, None, 0
        if not self.active or batch.turn is None:  # single-turn rows are one turn: the ordinary update
            return default()
        steps = []
        for k, rows in turn_rows(batch.turn.cpu(), batch.loss_mask().cpu(), self.spec.order):
            order = rows[torch.randperm(len(rows), generator=generator)]
            for part in order.chunk(min(learner.mini_batches, len(rows))):
                steps.append(part)
                self._turns.append(k)
        return steps

    def begin(self, learner, mb: Rollouts) -> tuple[Rollouts, dict[str, tuple[float, float]]]:
        """Before an optimizer step on `mb` (a selected copy): fold the last turn's change into rho when the
        turn changes, keep only this turn's tokens, recompute pi_old, scale the advantages by rho."""
        if not self.active or not self._turns:
            return mb, {}
        k = self._turns[self._step]
        self._step += 1
        if self._prev is not None and self._prev_turn != k:
            if self.spec.ratios:
                self._fold(learner)
            self._prev = None
        keep = (mb.turn == k).to(mb.completion_mask.dtype)
        mb.completion_mask = mb.completion_mask * keep
        if mb.advantages.dim() == 2:
            mb.advantages = mb.advantages * keep.to(mb.advantages.dtype)
        learner.fill_logprobs(mb)  # pi_old: the policy after the updates of the turns before this one
        rho = torch.tensor([self._rho.get(e, 1.0) for e in _episodes(mb).tolist()], dtype=mb.advantages.dtype)
        if self.spec.ratios:
            mb.advantages = mb.advantages * (rho if mb.advantages.dim() == 1 else rho[:, None]).to(mb.advantages.device)
        self._prev = mb if self._prev is None else Rollouts.concat([self._prev, mb])
        self._prev_turn = k
        return mb, {"seeupo/rho_mean": (float(rho.mean()), 1.0), "seeupo/rho_max": (float(rho.max()), 1.0),
                    "seeupo/rho_min": (float(rho.min()), 1.0)}  # fmt: skip

    def _fold(self, learner) -> None:
        """rho *= the last turn's clipped sequence ratio (per episode), clipped again (`update_ratios`)."""
        rows = self._prev
        old = rows.old_logprobs
        fresh = Rollouts(**rows.__dict__)
        fresh.old_logprobs = None
        learner.fill_logprobs(fresh)  # the policy after that turn's update
        r = turn_ratio(fresh.old_logprobs, old, rows.completion_mask, self.spec.clip_low, self.spec.clip_high)
        lo, hi = 1 - self.spec.clip_low, 1 + self.spec.clip_high
        for e, ri in zip(_episodes(rows).tolist(), r.tolist()):
            self._rho[e] = min(max(self._rho.get(e, 1.0) * ri, lo), hi)


def _episodes(batch: Rollouts) -> Tensor:
    """[N] the episode of each row (the row itself when the batch has no `episode`)."""
    return batch.episode.cpu() if batch.episode is not None else torch.arange(len(batch))
