"""What a run's console says about its steps beyond their numbers (`covey.train.run`).

* The step line: dynamic sampling's outcome when a step filters groups (`filter_text`) and the scoring
  time when scoring takes a large share of the step.
* `StepNotes` counts the steps where dynamic sampling fell back to the unfiltered batch or stayed
  underfilled (the run summary and its last lines report them), says once why, and says once when a
  step is far slower than the ones before it, with the likely reason: other work on the CPU, more
  generation rounds, slow scoring, longer completions.
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["StepNotes", "filter_text", "scoring_text"]

SLOW_FACTOR = 3.0  # a step this many times the median of the earlier ones is "far slower"
SLOW_MIN_S = 5.0  # ... and at least this many seconds slower (short steps jitter)


def filter_text(m: dict[str, Any]) -> str | None:
    """Dynamic sampling's outcome for the step line, or None when the step did not filter.

    >>> filter_text({"filter/gen_batches": 10, "filter/fallback_unfiltered": 1.0, "filter/kept_groups": 0})
    'filter: no group with signal in 10 rounds, trained unfiltered'
    >>> filter_text({"filter/gen_batches": 3, "filter/underfilled": 1.0, "filter/kept_groups": 5})
    'filter: 5 groups kept in 3 rounds (underfilled)'
    >>> filter_text({"filter/gen_batches": 2, "filter/underfilled": 0.0, "filter/kept_groups": 8})
    'filter: 8 groups kept in 2 rounds'
    """
    if "filter/gen_batches" not in m:
        return None
    rounds = int(m["filter/gen_batches"])
    if m.get("filter/fallback_unfiltered"):
        return f"filter: no group with signal in {rounds} rounds, trained unfiltered"
    kept = int(m.get("filter/kept_groups", 0))
    under = " (underfilled)" if m.get("filter/underfilled") else ""
    return f"filter: {kept} groups kept in {rounds} round{'s' * (rounds != 1)}{under}"


def scoring_text(m: dict[str, Any], share: float = 0.3) -> str | None:
    """'scoring 157s' when scoring took more than `share` of the step."""
    reward, step = m.get("time/reward"), m.get("time/step")
    if reward is None or not step or reward < share * step:
        return None
    return f"scoring {reward:.0f}s"


class StepNotes:
    """Counts and one-time notes over the steps one process runs (`observe` after each step)."""

    def __init__(self) -> None:
        self.steps = 0
        self.filtered = self.fallbacks = self.underfilled = 0
        self.times: list[float] = []
        self.lengths: list[float] = []
        self.rounds: list[float] = []
        self._said_fallback = self._said_slow = False

    def observe(self, step: int, m: dict[str, Any], cpu=None, threads: str = "") -> list[str]:
        """Lines to print after step `step` (its metrics `m`); `cpu` is a `covey.train.threads.CpuView`
        (or a callable giving one, asked only when a step is slow), `threads` what the thread count is."""
        self.steps += 1
        lines = []
        if "filter/gen_batches" in m:
            self.filtered += 1
            self.fallbacks += bool(m.get("filter/fallback_unfiltered"))
            self.underfilled += bool(m.get("filter/underfilled"))
            if m.get("filter/fallback_unfiltered") and not self._said_fallback:
                self._said_fallback = True
                lines.append(f"note: dynamic sampling found no group whose rewards differ in {int(m['filter/gen_batches'])} "
                             "generation rounds and trained on the last round unfiltered (counted in the summary as "
                             "filter_fallback_steps). Such a step pays for every round's generation and scoring. If every "
                             "group scores the same, check the reward or raise sampling.temperature; lower "
                             "algo.max_gen_batches (or the dynamic strategy's max_rounds) to bound the cost.")  # fmt: skip
        t = m.get("time/step")
        if t is not None:
            if len(self.times) >= 2 and not self._said_slow:
                base = statistics.median(self.times)
                if t > SLOW_FACTOR * base and t - base > SLOW_MIN_S:
                    self._said_slow = True
                    view = cpu() if callable(cpu) else cpu
                    lines.append(f"note: step {step} took {t:.0f} s, {t / base:.0f}x the median of the steps before it "
                                 f"({base:.1f} s): {self._why(m, view, threads)}")  # fmt: skip
            self.times.append(float(t))
        self.lengths.append(float(m.get("length/mean", 0.0)))
        self.rounds.append(float(m.get("filter/gen_batches", 1)))
        return lines

    def _why(self, m: dict[str, Any], view, threads: str) -> str:
        reasons = []
        if view is not None and view.others >= 0.5:
            reasons.append(f"the CPU is busy with other work ({view.describe()}); {threads}")
        rounds = m.get("filter/gen_batches", 1)
        if rounds > max(self.rounds[-5:] or [1]):
            reasons.append(f"dynamic sampling ran {int(rounds)} generation rounds")
        if m.get("time/reward", 0.0) > 0.5 * m.get("time/step", 0.0):
            reasons.append(f"scoring took {m['time/reward']:.0f} s of it")
        base_len = statistics.median(self.lengths) if self.lengths else 0.0
        if base_len and m.get("length/mean", 0.0) > 2 * base_len:
            reasons.append(f"completions were {m['length/mean'] / base_len:.1f}x longer")
        if not reasons:
            load = f" (load average {view.load:.1f} on {view.usable:g} cores)" if view is not None else ""
            reasons.append(f"nothing in covey's own metrics explains it{load}; other work on the machine?")
        return "; ".join(reasons)

    def summary(self) -> dict[str, int]:
        """Counts for the run summary (only when some step filtered)."""
        if not self.filtered:
            return {}
        return {"filter_steps": self.filtered, "filter_fallback_steps": self.fallbacks, "filter_underfilled_steps": self.underfilled}

    def closing_lines(self) -> list[str]:
        if not self.filtered:
            return []
        return [f"dynamic sampling: trained unfiltered on {self.fallbacks} and underfilled on {self.underfilled} of the "
                f"{self.filtered} steps this process filtered"]  # fmt: skip
