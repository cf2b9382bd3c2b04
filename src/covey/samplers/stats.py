"""Per-prompt statistics logged for every sampler (the trainer calls `prompt_stats` once a step).

    prompts/pass_rate_hist/<bin>   fraction of prompts whose pass rate falls in the bin:
                                   "0" (never solved), "0-25", "25-50", "50-75", "75-100" (half-open,
                                   upper end included), "100" (always solved)
    prompts/zero_signal_frac       fraction of groups whose scalar rewards are all equal (zero
                                   advantage under every group-relative estimator; a group of one
                                   counts as zero-signal)
    prompts/rollouts_per_prompt_{mean,min,max}   rows generated per dataset item this step
    prompts/unique                 distinct dataset items in the batch

The pass rate is `covey.samplers.feedback.row_success` averaged per item. These describe the batch the
estimator sees: after the `dynamic` strategy filtered it, zero_signal_frac is 0 by construction and
the strategy's own `filter/zero_signal_frac` tells what was generated.
"""

from __future__ import annotations

import torch

from covey.samplers.feedback import prompt_outcomes
from covey.samplers.filters import informative_groups
from covey.rollouts import Groups, Rollouts

__all__ = ["PASS_RATE_BINS", "pass_rate_histogram", "prompt_stats"]

PASS_RATE_BINS = ("0", "0-25", "25-50", "50-75", "75-100", "100")


def pass_rate_histogram(rates: torch.Tensor) -> dict[str, float]:
    """Fraction of `rates` (values in [0, 1]) in each of `PASS_RATE_BINS`."""
    r = rates.double()
    n = max(r.numel(), 1)
    zero, one = r <= 0.0, r >= 1.0
    mid = ~(zero | one)
    counts = [zero.sum()]
    for lo, hi in ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)):
        counts.append((mid & (r > lo) & (r <= hi)).sum())
    counts.append(one.sum())
    return {f"prompts/pass_rate_hist/{b}": float(c) / n for b, c in zip(PASS_RATE_BINS, counts)}


def prompt_stats(batch: Rollouts) -> dict[str, float]:
    """The metrics above for one scored batch (empty batch or no rewards: no metrics)."""
    if len(batch) == 0 or batch.rewards is None:
        return {}
    _, succ, count = prompt_outcomes(batch)
    out = pass_rate_histogram(succ / count)
    keep = informative_groups(batch.scalar_rewards().cpu(), batch.group.cpu())
    groups = Groups.of(batch.group.cpu())
    signal = torch.zeros(groups.num, dtype=torch.bool).index_put_((groups.index,), keep, accumulate=False)
    out["prompts/zero_signal_frac"] = 1.0 - float(signal.double().mean())
    out["prompts/rollouts_per_prompt_mean"] = float(count.mean())
    out["prompts/rollouts_per_prompt_min"] = float(count.min())
    out["prompts/rollouts_per_prompt_max"] = float(count.max())
    out["prompts/unique"] = float(len(count))
    return out
