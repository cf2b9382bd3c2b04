"""`dars` rollout strategy: a second sampling stage gives hard prompts extra rollouts (DARS / DARS-B).

Paper: "Depth-Breadth Synergy in RLVR: Unlocking LLM Reasoning Gains with Adaptive Exploration"
(DARS, Difficulty-Adaptive Rollout Sampling; DARS-B with breadth), arXiv 2508.13755. Checked against
the released code: yangzhch6/DARS @ 9b21b71486614b609df241d8a1aa31cffe40b7f2
(`verl/verl/trainer/ppo/ray_dars_trainer.py`: `schedule_ET`, `schedule_HW`, the second-sampling,
filter and skip block of `fit`; notes: docs/sampling.md):

    1. N rollouts per prompt (the sampler's group size); acc_q = mean success of the N
    2. dN_q = schedule(acc_q) more rollouts of q (second engine call, same sampling settings)
    3. q's group = its N + dN_q rows
    4. filter (always on in the code): keep q iff 0 < acc_combined(q) < upper (default 1.0); when no
       prompt is left the code skips the step ("No valid samples left after filtering"): the strategy
       returns an empty batch and the trainer skips the update (`train/skipped_step`). One difference:
       the skipped step counts toward covey's `steps`, where the code draws the next batch under the
       same global step
    5. advantage A = r - mean over the combined group (std off: use `dr_grpo`)

covey's variants, as named options: `filter: false` keeps every prompt; `on_empty: keep` trains on
the whole unfiltered batch when the filter leaves nothing. `dars/second_saved` is the code's
`2nd_saved`: prompts with first-stage accuracy 0 and combined accuracy > 0, over all prompts.

    S(acc) = 2 sqrt(acc (1 - acc)) if use_std else 2 acc (1 - acc);  peak = N if use_std else N / 2
    acc <= 1e-6 -> acc = 0.5 / N;  acc >= 0.5 -> dN = 0
    et: dN = min(ceil((peak - N S) / S), n_max - N);  hw: target 2 (1 - acc) peak instead of peak

It is a rollout strategy, not a sampler: the second stage needs the first stage's rewards inside the
same step, which only the strategy seam has. Select it with ``rollout.strategy: {name: dars}`` and
any sampler; DARS-B ("breadth") is the same strategy with a large prompt batch trained in one
full-batch update for several epochs (examples/tiny/dars_b.yaml).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch

from covey.samplers.feedback import row_success
from covey.strategies.base import RolloutContext, register_strategy
from covey.strategies.group import sample_groups
from covey.rollouts import Rollouts

__all__ = ["DarsRollout", "dars_extra"]


def dars_extra(acc: float, n: int, n_max: int, schedule: str = "et", use_std: bool = False) -> int:
    """Extra rollouts for a prompt with first-stage accuracy `acc` over `n` rollouts (DARS code)."""
    if acc <= 1e-6:
        acc = 0.5 / n
    if acc >= 0.5:
        return 0
    s = 2 * math.sqrt(acc * (1 - acc)) if use_std else 2 * acc * (1 - acc)
    peak = n if use_std else 0.5 * n
    target = peak if schedule == "et" else 2 * (1 - acc) * peak
    return max(0, min(math.ceil((target - n * s) / s), n_max - n))


@register_strategy("dars")
class DarsRollout:
    """DARS two-stage rollout (see the module docstring).

    schedule:  "et" (equal treatment) or "hw" (hardness weighted).
    n_max:     most rollouts per prompt over both stages (code: 32 for et, 64 for hw).
    use_std:   the schedule's S(acc) for std-normalised advantages (code default False).
    filter:    keep only prompts with 0 < combined accuracy < upper (the code; false: keep all).
    upper:     the filter's upper accuracy threshold (the code's algorithm.upper_threshold).
    on_empty:  when the filter leaves no prompt: "skip" the step (the code) or "keep" the whole batch.
    """

    def __init__(self, *, schedule: Literal["et", "hw"] = "et", n_max: int = 32, use_std: bool = False,
                 filter: bool = True, upper: float = 1.0, on_empty: Literal["skip", "keep"] = "skip"):  # fmt: skip
        if schedule not in ("et", "hw"):
            raise ValueError(f"rollout strategy dars: schedule must be 'et' or 'hw', got {schedule!r}")
        if n_max < 1:
            raise ValueError(f"rollout strategy dars: n_max must be >= 1, got {n_max}")
        if on_empty not in ("skip", "keep"):
            raise ValueError(f"rollout strategy dars: on_empty must be 'skip' or 'keep', got {on_empty!r}")
        self.schedule, self.n_max, self.use_std, self.filter, self.upper = schedule, n_max, use_std, filter, upper
        self.on_empty = on_empty

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sizes = [d.n for d in ctx.draws]
        first = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0))
        metrics = dict(ctx.score(first))
        succ = torch.zeros(len(items), dtype=torch.float64).index_add_(0, first.group.cpu(), row_success(first).cpu())
        acc = (succ / torch.tensor(sizes, dtype=torch.float64)).tolist()
        extra = [dars_extra(a, n, max(self.n_max, n), self.schedule, self.use_std) for a, n in zip(acc, sizes)]
        hard = [i for i, e in enumerate(extra) if e > 0]
        batch = first
        if hard:
            more = [dataclasses.replace(ctx.draws[i], n=extra[i]) for i in hard]
            second = sample_groups(ctx.engine, ctx.tokenizer, more, ctx.sampling(1))
            metrics.update(ctx.score(second))
            second.group = torch.tensor(hard, dtype=torch.long, device=second.group.device)[second.group]
            batch = Rollouts.concat([first, second])
            batch = batch.select(torch.argsort(batch.group.cpu(), stable=True))
        tot = torch.zeros(len(items), dtype=torch.float64).index_add_(0, batch.group.cpu(), row_success(batch).cpu())
        acc_all = tot / torch.bincount(batch.group.cpu(), minlength=len(items)).double()
        saved = sum(1 for i in range(len(items)) if acc[i] < 1e-6 and acc_all[i] > 1e-6) / len(items)
        skipped = 0.0
        if self.filter:
            keep_group = (acc_all > 0) & (acc_all < self.upper)
            metrics["dars/filtered_frac"] = 1.0 - float(keep_group.double().mean())
            if bool(keep_group.any()) or self.on_empty == "skip":
                batch = batch.select(keep_group[batch.group.cpu()])  # nothing left: an empty batch, no update
                skipped = float(len(batch) == 0)
        metrics.update({
            "dars/extra_rollouts": float(sum(extra)),
            "dars/hard_frac": len(hard) / len(items),
            "dars/second_saved": saved,
            "dars/skipped": skipped,
        })  # fmt: skip
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
