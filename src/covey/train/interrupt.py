"""Stopping a run early: Ctrl-C / SIGTERM at a safe point inside a step, and how it ends.

The first signal asks the running step to stop (`StopFlag.request`): with the inline executor the
step is abandoned at its next safe point (before or after a generation call, before scoring, before a
learner micro-batch until the step's first optimizer step), its sampler, strategy, RNG and hook state
are rewound to the step's start (`covey.train.trainer.Trainer.step`), and the run saves a checkpoint
of the last completed step, exactly as if it had stopped between steps. Past the first optimizer
step, and with the thread / ray executors, the step finishes first. A second signal exits at once.

`TrainingInterrupted` is what `covey.train.run.train` raises after saving: a `KeyboardInterrupt`
(as TRL's trainer lets one through), carrying the run summary and the signal; the CLI exits with
128 + the signal number (130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["StopFlag", "StopRequested", "StoppableEngine", "TrainingInterrupted", "signal_name", "stop_signals"]


class StopRequested(BaseException):
    """Raised at a safe point when a stop was asked for. A BaseException (like KeyboardInterrupt), so an
    `except Exception` in a strategy, environment or reward wrapper cannot swallow it."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by a signal after saving a checkpoint; `summary` is what `train` would have
    returned (run_dir, checkpoint, ...), `signum` the signal."""

    def __init__(self, summary: dict[str, Any], signum: int):
        super().__init__(f"training stopped by signal {signum} at step {summary.get('step')}; saved {summary.get('checkpoint')}")
        self.summary, self.signum = summary, signum


class StopFlag:
    """Set by a signal handler, checked at the step's safe points (`check`)."""

    def __init__(self) -> None:
        self.requested = False
        self.engines: list[Any] = []  # cut short on request: their generate call in flight returns at once

    def request(self) -> None:
        """Ask for a stop (safe in a signal handler). An interruptible engine's `generate` in flight is
        cut short from a helper thread: the engine's lock may be held by the code the handler interrupted."""
        self.requested = True
        for engine in self.engines:
            threading.Thread(target=engine.interrupt, name="covey-stop", daemon=True).start()

    def check(self) -> None:
        if self.requested:
            raise StopRequested


class StoppableEngine:
    """The engine as the rollout strategy sees it when a run can stop mid-step: a stop asked for before or
    during `generate` raises `StopRequested` (the rows cut short are discarded); every other member is the
    engine's own."""

    def __init__(self, engine: Any, flag: StopFlag):
        self._engine, self._flag = engine, flag

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, prompts, n: int, sampling) -> Any:
        self._flag.check()
        out = self._engine.generate(prompts, n, sampling)
        self._flag.check()
        return out


@contextmanager
def stop_signals(on_first: Callable[[int], None]) -> Iterator[dict[str, Any]]:
    """SIGINT (Ctrl-C) and SIGTERM (what `kill` and schedulers send) while the block runs: the first
    calls `on_first(signum)` and is recorded in the yielded state's "signum"; a second raises
    KeyboardInterrupt at once (state "aborted"). Signal handlers can only be set from the main thread:
    elsewhere the caller's own handling stays."""
    state: dict[str, Any] = {"signum": None, "aborted": False}

    def handler(signum, frame):
        if state["signum"] is not None:
            state["aborted"] = True
            raise KeyboardInterrupt
        state["signum"] = signum
        on_first(signum)

    main = threading.current_thread() is threading.main_thread()
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield state
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
