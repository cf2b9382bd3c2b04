"""Engines for the thread executor's tests (loaded by import path from a config): one that fails, one
that holds a generate call until it is interrupted."""

import threading

from covey.engine.torch_engine import TorchEngine


class FailingEngine(TorchEngine):
    """A torch engine whose `fail_at`-th generate call (0-based) raises."""

    def __init__(self, model, tokenizer=None, *, fail_at: int = 1, **kw):
        super().__init__(model, tokenizer, **kw)
        self.fail_at, self.calls = fail_at, 0

    def generate(self, prompts, n, sampling):
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            raise RuntimeError(f"fake engine failure at call {self.fail_at}")
        return super().generate(prompts, n, sampling)


class _HeldFlag(threading.Event):
    """The torch engine's interrupt flag (`_stop`), which `_generate_all` reads before each wave and
    `_generate` once per decode step. Armed for one call, its `after + 1`-th read (after `after`
    decode steps; the first read is the wave's) sets `held` and blocks until `interrupt()` sets it."""

    def __init__(self, held: threading.Event, after: int, wait_s: float):
        super().__init__()
        self.held, self.after, self.wait_s = held, after, wait_s
        self.reads: int | None = None

    def arm(self, on: bool) -> None:
        self.reads = 0 if on else None

    def is_set(self) -> bool:
        if self.reads is not None:
            self.reads += 1
            if self.reads == self.after + 1:
                self.reads = None
                self.held.set()
                if not self.wait(self.wait_s):
                    raise RuntimeError(f"HoldingEngine: no interrupt within {self.wait_s} s")
        return super().is_set()


class HoldingEngine(TorchEngine):
    """A torch engine whose generate call number `hold_call` (0-based) stops after `hold_tokens`
    decode steps and waits (at most `wait_s`) for `interrupt()`: a test publishes new weights
    exactly then (it waits for `held`), no timing race. Every call is kept in `calls` as
    (prompts, n, sampling, generation)."""

    def __init__(self, model, tokenizer=None, *, hold_call: int = 1, hold_tokens: int = 2, wait_s: float = 120.0, **kw):
        super().__init__(model, tokenizer, **kw)
        self.hold_call, self.calls = hold_call, []
        self.held = threading.Event()
        self._stop = _HeldFlag(self.held, hold_tokens, wait_s)

    def generate(self, prompts, n, sampling):
        self._stop.arm(len(self.calls) == self.hold_call)
        gen = super().generate(prompts, n, sampling)
        self.calls.append(([[int(t) for t in p] for p in prompts], n, sampling, gen))
        return gen


class UninterruptibleEngine(TorchEngine):
    """A torch engine that does not offer `interrupt()` (not an `InterruptibleEngine`)."""

    interrupt = None


class HangingEngine(TorchEngine):
    """A torch engine whose `hang_at`-th generate call (0-based) blocks for `hang_s` seconds (a stuck backend)."""

    def __init__(self, model, tokenizer=None, *, hang_at: int = 1, hang_s: float = 120.0, **kw):
        super().__init__(model, tokenizer, **kw)
        self.hang_at, self.hang_s, self.calls = hang_at, hang_s, 0

    def generate(self, prompts, n, sampling):
        import time

        self.calls += 1
        if self.calls - 1 == self.hang_at:
            time.sleep(self.hang_s)
        return super().generate(prompts, n, sampling)
