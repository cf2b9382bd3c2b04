"""`drive`: DRIVE's two-stage RL data schedule -- uniform entropy expansion, then a hard-focus curriculum.

Paper: "DRIVE: Data Curation Best Practices for Reinforcement Learning with Verifiable Reward in
Competitive Code Generation", arXiv 2511.06307 (Tencent Hunyuan). Status SECONDARY (the
tencent/DRIVE-RL model card); notes: docs/sampling.md. Stage 1 trains on the whole, uniformly distributed
set with 8 rollouts per prompt; stage 2 ("Pre-GRPO") trains on a small set of challenging problems with
64 rollouts per prompt under a curriculum that "continuously retains the most difficult instances".
The re-estimation rule and its thresholds are UNVERIFIED; covey implements this reading:

    stage 1 (the first `stage1_steps` observed steps): the uniform permutation of every item
    stage 2: a pool of hard prompts, walked in a seeded permutation; at the end of each pass over
             the pool it is rebuilt from the current pass-rate estimates:
                 pool = {prompts with pass rate < tau} (prompts never seen count as hard)
                 fewer than `min_pool` left: the `min_pool` lowest pass rates (ties: item order)
             rollouts per prompt: `stage2_group_size` (None: the run's G)
    pass rate: `feedback.row_success` mean per prompt at each visit, smoothed by `ema`
               (p <- ema p + (1 - ema) p_visit; 0 keeps the latest visit)

Stage 1's shorter generation window is a run setting (`sampling.max_new_tokens`), not the sampler's.

Fidelity (re-read 2026-11-24): reconstructed. The authors' training code is not released (the
tencent/DRIVE-RL model card only); zheself/DRIVE-RLVR is a third-party two-stage GRPO project, not
the paper's code, and was not used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from covey.samplers.base import Draw, Feedback, register_sampler
from covey.samplers.feedback import ItemIndex, draw_generator, prompt_outcomes
from covey.samplers.sampler import UniformSampler
from covey.rollouts import Rollouts

__all__ = ["DriveSampler", "hard_pool"]


def hard_pool(rates: torch.Tensor, tau: float, min_pool: int) -> list[int]:
    """Positions of prompts with pass rate < tau (NaN = unseen = hard); at least the `min_pool` hardest."""
    r = rates.double()
    keep = torch.nonzero(torch.isnan(r) | (r < tau)).flatten().tolist()
    if len(keep) >= min(min_pool, r.numel()):
        return keep
    key = torch.where(torch.isnan(r), torch.full_like(r, -1.0), r)
    return sorted(torch.argsort(key, stable=True)[:min_pool].tolist())


@register_sampler("drive")
class DriveSampler(UniformSampler):
    """DRIVE's schedule (see the module docstring).

    stage1_steps:       observed steps of uniform sampling before the hard focus (0: hard focus at once).
    tau:                pass rate at or above which a prompt leaves the hard pool (0.75, UNVERIFIED).
    min_pool:           the pool never holds fewer prompts than this (the hardest ones).
    stage2_group_size:  rollouts per prompt in stage 2 (DRIVE: 64); None keeps the run's G.
    ema:                smoothing of the pass-rate estimate, in [0, 1).
    """

    def __init__(
        self, items: Sequence[dict], seed: int = 0, *, stage1_steps: int = 0, tau: float = 0.75, min_pool: int = 1,
        stage2_group_size: int | None = None, ema: float = 0.0,
    ):  # fmt: skip
        super().__init__(items, seed)
        if stage1_steps < 0 or min_pool < 1 or not 0.0 < tau <= 1.0 or not 0.0 <= ema < 1.0:
            raise ValueError(f"sampler drive needs stage1_steps >= 0, min_pool >= 1, 0 < tau <= 1, 0 <= ema < 1; got "
                             f"{stage1_steps}, {min_pool}, {tau}, {ema}")  # fmt: skip
        if stage2_group_size is not None and stage2_group_size < 1:
            raise ValueError(f"sampler drive: stage2_group_size must be >= 1, got {stage2_group_size}")
        self.stage1_steps, self.tau, self.min_pool, self.stage2_group_size, self.ema = stage1_steps, tau, min_pool, stage2_group_size, ema
        self.index = ItemIndex(items)
        self.rates = torch.full((len(items),), math.nan, dtype=torch.float64)
        self.steps = 0
        self.pool_order: list[int] = []
        self.pool_pos, self.pool_epoch = 0, 0

    @property
    def stage(self) -> int:
        return 1 if self.steps < self.stage1_steps else 2

    def next(self, k: int, group_size: int) -> list[Draw]:
        n = self.stage2_group_size if self.stage == 2 and self.stage2_group_size else group_size
        return [Draw(item, n) for item in self.pick(k)]

    def pick(self, k: int) -> list[dict]:
        if self.stage == 1:
            return super().pick(k)
        out = []
        while len(out) < k:
            if self.pool_pos >= len(self.pool_order):
                self._refresh()
            out.append(self.items[self.pool_order[self.pool_pos]])
            self.pool_pos += 1
        return out

    def _refresh(self) -> None:
        pool = hard_pool(self.rates, self.tau, self.min_pool)
        gen = draw_generator(self.seed, "drive", self.pool_epoch)
        self.pool_order = [pool[i] for i in torch.randperm(len(pool), generator=gen).tolist()]
        self.pool_pos, self.pool_epoch = 0, self.pool_epoch + 1

    def observe(self, batch: Rollouts) -> Feedback:
        ids, succ, count = prompt_outcomes(batch)
        pos = self.index.positions(ids)
        visit = succ / count
        old = self.rates[pos]
        self.rates[pos] = torch.where(torch.isnan(old), visit, self.ema * old + (1 - self.ema) * visit)
        stage = self.stage
        self.steps += 1
        pool = torch.tensor(self.pool_order, dtype=torch.long)
        seen = self.rates[pool][~torch.isnan(self.rates[pool])] if pool.numel() else pool.double()
        return Feedback({
            "sampler/drive/stage": float(stage),
            "sampler/drive/pool_size": float(len(self.pool_order)) if stage == 2 else float(len(self.items)),
            "sampler/drive/pool_pass_rate": float(seen.mean()) if seen.numel() else 0.0,
        })

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(), "rates": self.rates.clone(), "steps": self.steps,
            "pool_order": torch.tensor(self.pool_order, dtype=torch.long), "pool_pos": self.pool_pos,
            "pool_epoch": self.pool_epoch,
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state["rates"].numel() != len(self.items):
            raise ValueError(f"sampler drive: checkpoint holds {state['rates'].numel()} prompts, the task has {len(self.items)}")
        self.rates = state["rates"].clone().double()
        self.steps, self.pool_pos, self.pool_epoch = state["steps"], state["pool_pos"], state["pool_epoch"]
        self.pool_order = state["pool_order"].tolist()
