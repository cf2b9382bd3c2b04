"""`vspo`: value-based refill of zero-advantage groups (VSPO, the sampling half of PRS + VSPO).

Paper: "PRS + VSPO", arXiv 2512.07478. Confirmed by the abstract: VSPO replaces zero-advantage
(low-value) samples with prompts selected by a task-value metric that balances difficulty and
uncertainty, and applies value-smoothing clipping. The value function below is covey's placeholder
for that metric (uncertainty × difficulty), not the paper's formula; status RECONSTRUCTED. No code
of the authors was found (searched 2026-11-24: "VSPO value-based sampling policy optimization").

    per prompt i: s_i successes and n_i rollouts seen so far (`covey.samplers.feedback.prompt_outcomes`,
                  every scored round of the step, filtered groups included; rows with off-policy
                  tokens, `step_correction`'s corrected rows, are not the policy's and not counted)
    p_hat_i  = (s_i + a0) / (n_i + 2 a0)                         (unseen prompts: 1/2)
    value_i  = p_hat_i (1 - p_hat_i) · (1 - p_hat_i) ** beta     (uncertainty × difficulty)
    main draw (the trainer's `next(B, G)`):  the `uniform` order (a seeded permutation, epoch by epoch)
    refill   (a strategy's `ctx.draw(k)`, e.g. `dynamic` after it dropped zero-advantage groups):
             the k highest-value prompts not yet drawn this step (seeded random tie-break)

With `rollout.strategy: dynamic` the zero-advantage groups never reach `observe` (the strategy filters
them), so the sampler wraps the step's `ctx.score` in `before_rollout` and counts the outcomes of every
scored round; it also wraps `ctx.draw` to tell refills from the main draw. Without a strategy that
scores itself, `observe` counts the batch the trainer scored.

Value-smoothing clipping is left out: the paper's abstract names it but neither its formula nor
what is clipped (the value, the sampling weight or the policy ratio) is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

import torch
from torch import Tensor

from covey.samplers.base import Draw, Feedback, register_sampler
from covey.samplers.feedback import ItemIndex, draw_generator, prompt_outcomes
from covey.samplers.sampler import UniformSampler
from covey.rollouts import Rollouts

__all__ = ["VspoSampler", "vspo_value"]


def vspo_value(p_hat: Tensor, beta: float) -> Tensor:
    """value = p (1 - p) (1 - p)^beta: zero for always-solved and never-solved prompts."""
    q = 1.0 - p_hat
    return p_hat * q * q.pow(beta)


def _policy_outcomes(batch: Rollouts) -> tuple[Tensor, Tensor, Tensor]:
    """`prompt_outcomes` of the rows the policy wrote alone (rows with `offpolicy_mask` tokens, e.g.
    `step_correction`'s corrected rows, do not measure the policy's pass rate)."""
    if batch.offpolicy_mask is not None:
        own = batch.offpolicy_mask.sum(-1) == 0
        if not bool(own.all()):
            batch = batch.select(own)
    if len(batch) == 0:
        empty = torch.zeros(0, dtype=torch.float64)
        return torch.zeros(0, dtype=torch.long), empty, empty
    return prompt_outcomes(batch)


@register_sampler("vspo")
class VspoSampler(UniformSampler):
    """Uniform main draw, value-ranked refills (see the module docstring).

    beta:  difficulty exponent, >= 0 (0: pure uncertainty p (1 - p); larger favours harder prompts).
    a0:    pseudo-count added to successes and to failures for p_hat, > 0.
    """

    def __init__(self, items: Sequence[dict], seed: int = 0, *, beta: Annotated[float, Field(ge=0)] = 1.0,
                 a0: Annotated[float, Field(gt=0)] = 0.5):  # fmt: skip
        super().__init__(items, seed)
        if beta < 0:
            raise ValueError(f"sampler vspo: beta must be >= 0, got {beta}")
        if a0 <= 0:
            raise ValueError(f"sampler vspo: a0 must be > 0, got {a0}")
        self.beta, self.a0 = float(beta), float(a0)
        self.index = ItemIndex(items)
        m = len(items)
        self.succ = torch.zeros(m, dtype=torch.float64)
        self.count = torch.zeros(m, dtype=torch.float64)
        self.pending = torch.zeros(m, dtype=torch.bool)  # drawn this step
        self.calls = 0  # refill calls so far (the tie-break generator's counter)
        self._refilling = False
        self._scored: list[tuple[Tensor, Tensor, Tensor]] = []  # outcomes of the step's scored rounds
        self._step_refills: list[float] = []  # values of this step's refill picks

    def p_hat(self) -> Tensor:
        return (self.succ + self.a0) / (self.count + 2 * self.a0)

    def next(self, k: int, group_size: int) -> list[Draw]:
        picked = self._refill(k) if self._refilling else [self.index.pos[int(it["id"])] for it in self.pick(k)]
        self.pending[picked] = True
        return [Draw(self.items[i], group_size) for i in picked]

    def _refill(self, k: int) -> list[int]:
        gen = draw_generator(self.seed, "vspo", self.calls)
        self.calls += 1
        value = vspo_value(self.p_hat(), self.beta)
        if self.pending.all():  # every item is out already: allow repeats rather than fail
            self.pending.zero_()
        score = torch.where(self.pending, torch.full_like(value, -1.0), value)
        ties = torch.rand(len(score), generator=gen, dtype=torch.float64) * 1e-12
        order = torch.argsort(score + ties, descending=True, stable=True)
        pick = order[: min(k, int((~self.pending).sum()))].tolist()
        while len(pick) < k:  # fewer items than k: cycle through the ranking
            pick += order[: k - len(pick)].tolist()
        self._step_refills += value[pick].tolist()
        return pick

    def before_rollout(self, draws: list[Draw], ctx) -> tuple[list[Draw], dict[str, float]]:
        score, draw = ctx.score, ctx.draw

        def counted_score(batch: Rollouts) -> dict[str, float]:
            out = score(batch)
            self._scored.append(_policy_outcomes(batch))
            return out

        def refill(k: int) -> list[Draw]:
            self._refilling = True
            try:
                return draw(k)
            finally:
                self._refilling = False

        ctx.score, ctx.draw = counted_score, refill
        return draws, {}

    def observe(self, batch: Rollouts) -> Feedback:
        seen = self._scored or [_policy_outcomes(batch)]
        for ids, succ, count in seen:
            pos = self.index.positions(ids)
            self.succ.index_add_(0, pos, succ)
            self.count.index_add_(0, pos, count)
        p = self.p_hat()[self.index.positions(torch.unique(batch.prompt_id.cpu()))]
        metrics = {
            "sampler/vspo/refills": float(len(self._step_refills)),
            "sampler/vspo/refill_value_mean": sum(self._step_refills) / len(self._step_refills) if self._step_refills else 0.0,
            "sampler/vspo/p_hat_mean": float(p.mean()) if p.numel() else 0.0,
            "sampler/vspo/visited_frac": float((self.count > 0).double().mean()),
        }
        self._scored, self._step_refills = [], []
        self.pending.zero_()
        return Feedback(metrics)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "succ": self.succ.clone(), "count": self.count.clone(),
                "pending": self.pending.clone(), "calls": self.calls}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["succ"].shape != self.succ.shape:
            raise ValueError(f"sampler vspo: checkpoint holds {state['succ'].numel()} prompts, the task has {len(self.items)}")
        super().load_state_dict(state)
        self.succ, self.count = state["succ"].clone(), state["count"].clone()
        self.pending, self.calls = state["pending"].clone(), int(state["calls"])
