"""How many torch CPU threads a run uses: `threads: auto` picks from the cores that are actually free.

On a machine with other work, OpenMP threads that outnumber the free cores wait on each other at every
parallel region (a thread that is descheduled holds the rest up), so a step can take many times its fair
share of the CPU. `threads: auto` (the default) counts

  * the cores this process may use: its CPU affinity, capped by a cgroup CPU quota (containers);
  * the other runnable tasks on them now: `procs_running` of /proc/stat minus this process's own
    running threads, sampled over ~0.1 s (scaled by the share of the machine's CPUs this process may
    use), which reacts at once, unlike the 1-minute load average;

and uses `round(usable - others)` threads, at least 1 and at most torch's own default (so
`OMP_NUM_THREADS` still caps it). The trainer's loop re-checks between steps
(`covey.train.run`), so a run speeds up again when the other work ends. covey also sets libgomp's
`OMP_WAIT_POLICY=PASSIVE` before torch is imported (`covey/__init__.py`, unless the variable is set):
an idle OpenMP thread then sleeps instead of spinning on a core another process needs.
Measurements: benchmarks/README.md ("A busy machine").

Everything here reads Linux's /proc and /sys; elsewhere `auto` is torch's default.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["CpuView", "Threads", "auto_threads", "cpu_view", "usable_cores"]


class CpuView(tuple):
    """(usable cores, other runnable tasks on them, 1-minute load average) as `cpu_view` saw them."""

    __slots__ = ()

    def __new__(cls, usable: float, others: float, load: float):
        return super().__new__(cls, (usable, others, load))

    usable = property(lambda self: self[0])
    others = property(lambda self: self[1])
    load = property(lambda self: self[2])

    def describe(self) -> str:
        return f"{self.others:.1f} other runnable tasks on {self.usable:g} usable cores (load average {self.load:.1f})"


def usable_cores() -> float:
    """The cores this process may run on: its affinity, capped by a cgroup v2 `cpu.max` or v1 CFS quota."""
    try:
        cores = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = float(os.cpu_count() or 1)
    quota = _cgroup_quota()
    return min(cores, quota) if quota else cores


def _cgroup_quota() -> float | None:
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()  # v2: "max 100000" or "200000 100000"
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
    except (OSError, ValueError, IndexError):
        pass
    try:  # v1
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            return quota / period
    except (OSError, ValueError):
        pass
    return None


def _procs_running() -> int | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _own_running() -> int:
    """This process's threads in state R (the one reading counts itself)."""
    n = 0
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            n += stat.read_text().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue
    return n


def cpu_view(samples: int = 10, interval_s: float = 0.01) -> CpuView | None:
    """What `auto_threads` decides from, or None where /proc cannot be read (not Linux)."""
    usable = usable_cores()
    counts = []
    for i in range(samples):
        running = _procs_running()
        if running is None:
            return None
        counts.append(max(0, running - _own_running()))
        if i + 1 < samples:
            time.sleep(interval_s)
    share = usable / (os.cpu_count() or usable)  # other tasks spread over the machine: those on our cores
    others = sum(counts) / len(counts) * min(1.0, share)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return CpuView(usable, others, load)


def auto_threads(view: CpuView | None) -> int | None:
    """Threads for `threads: auto`: the usable cores minus the other runnable tasks, rounded, at least 1;
    None (torch's default) when the view is unknown.

    >>> auto_threads(CpuView(2, 0.0, 0.3)), auto_threads(CpuView(2, 0.6, 1.0)), auto_threads(CpuView(2, 4.0, 6.0))
    (2, 1, 1)
    >>> auto_threads(CpuView(8, 2.4, 3.0)), auto_threads(CpuView(1.5, 0.0, 0.0)), auto_threads(None) is None
    (6, 2, True)
    """
    if view is None:
        return None
    return max(1, min(int(view.usable + 0.5), int(view.usable - view.others + 0.5)))


_DEFAULT: list[int] = []


def _torch_default() -> int:
    """torch's own thread count in this process before covey changed it (OMP_NUM_THREADS when set, else
    one per core): `auto` never goes above it."""
    if not _DEFAULT:
        import torch

        _DEFAULT.append(torch.get_num_threads())
    return _DEFAULT[0]


class Threads:
    """The run's torch CPU thread count: `threads: N` fixes it, 0 leaves torch's default, "auto" chooses
    it from `cpu_view` at the start and again at every `apply` (the loop calls it between steps)."""

    def __init__(self, setting: int | str):
        self.setting = setting
        _torch_default()  # recorded before the first change
        self.view: CpuView | None = None

    def apply(self) -> str | None:
        """Set the thread count; a line saying what changed and why, or None when nothing did."""
        import torch

        if self.setting == "auto":
            self.view = cpu_view()
            want = auto_threads(self.view)
            if want is not None:
                want = min(want, _torch_default())
        else:
            want = int(self.setting) or None
        now = torch.get_num_threads()
        if want is None or want == now:
            return None
        torch.set_num_threads(want)
        why = f": {self.view.describe()}" if self.setting == "auto" and self.view is not None else ""
        return f"threads {now} -> {want}{why}"
