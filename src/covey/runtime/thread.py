"""`executor: thread`: generation of the next batches in a background thread while the learner trains.

One generator thread produces step batches in order (batch k is the one trained at step k). Before
each batch it asks the `StalenessGate` for admission at the newest published version v (waits
while k - v > max_staleness: pacing, nothing is discarded), then loads the newest published weights
into the engine and calls `produce(k, version)` (the trainer's collect: sampler -> strategy ->
rewards). The finished batch goes to a FIFO the trainer takes from (`next_batch`).

The learner `publish`es a copy of its weights (it keeps training on its own tensors) and the
generator thread alone loads them into the engine; the engine is built on its own copy of the
model, so the learner's in-place updates never touch weights the engine is reading. When they are
loaded:

- without interruption (`interrupt_on_update` False): between two batches, never under a running
  generation; every token of a batch has the batch's admission version.
- with interruption (AReaL's default; `rollout_engine` wraps the engine the strategy calls): a
  publish while a `generate` is in flight calls the engine's `interrupt()`; the call returns its
  rows cut where they stand (finish reason "abort"), the generator thread loads the new weights
  and continues them as prompt + partial output (`covey.engine.carry.continue_generation`, APRIL's
  carry-over) under the new version, repeating if another publish comes. Each token keeps the
  version and log-prob of the weights that sampled it, so a batch mixes versions. Pending weights
  are also loaded before every later `generate` call of the batch (a strategy with several calls).
  Versions only grow within a batch, so every token's lag is <= the batch's admission staleness
  <= eta. Tree sessions (`tree_session`) are not interrupted: they run on the weights they started
  with. A publish in the instant between the check and the start of a `generate` (the engine says
  no call is in flight) is applied at the next call or batch: a missed refresh, never a broken bound.

Nothing waits forever: every wait has `timeout_s`. An exception in the generator thread is kept
and re-raised in the trainer's thread as a `GenerationFailed` whose one-line message names the
batch and the original error (chained). `pause()` stops the thread at the next batch boundary (a
checkpoint, an evaluation): the finished-but-untrained batches are then part of the state
(`state_dict`), and the sampler/strategy states are consistent with them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from typing import Any, Callable

from covey.engine.carry import ABORT, continue_generation
from covey.runtime.staleness import StalenessGate

__all__ = ["GenerationFailed", "ThreadExecutor"]


class GenerationFailed(RuntimeError):
    """The generation thread failed or hung; the message is one line naming what and where."""


class ThreadExecutor:
    """produce(k, version) -> (batch, metrics) makes batch k with the engine at `version`;
    load(weights, version) loads published weights into the engine (called on the generator thread).
    interrupt_on_update: a publish interrupts the engine's `generate` in flight (the engine the
    strategy calls must come from `rollout_engine`, and provide `InterruptibleEngine`)."""

    def __init__(self, produce: Callable[[int, int], tuple[Any, dict]], load: Callable[[Any, int], None], *,
                 max_staleness: int, timeout_s: float, limit: int | None = None, interrupt_on_update: bool = False):  # fmt: skip
        self._produce, self._load = produce, load
        self.max_staleness, self.timeout_s = max_staleness, float(timeout_s)
        self.interrupt_on_update = bool(interrupt_on_update)
        self._engine: Any = None  # the engine `rollout_engine` wrapped (interrupt_on_update)
        self._generating = False  # a wrapped generate call is in flight (publish may interrupt it)
        self._counts = _zero_counts()  # interruption counts of the batch being made
        self.gate = StalenessGate(max_staleness)
        self._cv = threading.Condition()
        self._ready: deque = deque()  # (k, batch, metrics, behaviour version), k ascending
        self._next = 0  # index of the next batch to generate
        self._limit = limit  # batches [0, limit) are made (the run's steps); None: no end
        self._published = 0  # newest version the learner published
        self._applied = 0  # version the engine's batches are generated at
        self._pending: tuple[Any, int] | None = None  # newest published weights not yet loaded
        self._sync_metrics: dict[str, float] = {}  # what the last weight load reported
        self._error: BaseException | None = None
        self._where = ""  # what the generator is doing, for error messages
        self._busy = False  # inside produce/load
        self._pause = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self.paused_waits = 0  # admissions that had to wait (pacing), cumulative
        self._paced_s = 0.0

    # ------------------------------------------------------------------ trainer side
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="covey-generator", daemon=True)
            self._thread.start()

    def next_batch(self, k: int) -> tuple[Any, dict, int]:
        """(batch, metrics, behaviour version) of batch `k`; waits at most `timeout_s`."""
        self.start()
        t0 = time.perf_counter()
        with self._cv:
            if self._limit is not None and k >= self._limit:  # stepped past the configured steps
                self._limit = k + 1
                self._cv.notify_all()
            ok = self._cv.wait_for(lambda: self._ready or self._error is not None, timeout=self.timeout_s)
            if not self._ready:  # batches finished before a failure are still trained on
                self._raise_error()
            if not ok:
                raise GenerationFailed(f"runtime: no batch from the generation thread within runtime.timeout_s={self.timeout_s:g} s "
                                       f"(it is {self._where or 'idle'}); raise runtime.timeout_s if generation is that slow")  # fmt: skip
            idx, batch, metrics, version = self._ready.popleft()
            if idx != k:
                raise RuntimeError(f"runtime: the generation thread made batch {idx} where step {k} expected batch {k}")
            metrics = dict(metrics)
            # counts of this process (they depend on timing, like the time/ keys)
            metrics["time/learner_wait"] = time.perf_counter() - t0  # the learner waiting for this batch
            metrics["time/paced"] = self._paced_s  # generator held by admission control, this process
            metrics["async/ready_batches"] = float(len(self._ready))  # finished and waiting after this one
            metrics["async/admitted_total"] = float(self.gate.accepted + self.gate.running)
            metrics["async/paced_total"] = float(self.paused_waits)  # admissions that had to wait
            return batch, metrics, version

    def publish(self, weights: Any | None, version: int) -> None:
        """The learner finished step `version - 1`: `weights` (a copy the learner will not touch
        again; None: unchanged since the last publish) become the engine's at the next batch boundary,
        or at once by interrupting the generate call in flight (`interrupt_on_update`)."""
        with self._cv:
            if weights is not None:
                self._pending = (weights, version)
                if self._generating and self._engine.interrupt():
                    self._counts["requested"] += 1
            self._published = version
            self._cv.notify_all()

    def rollout_engine(self, engine: Any) -> Any:
        """The engine the rollout strategy should call: `engine` itself, or with `interrupt_on_update`
        a view whose `generate` is interrupted by a publish and continues the cut rows under the new
        weights (everything else is the engine's own)."""
        if not self.interrupt_on_update:
            return engine
        self._engine = engine
        return _UpdatingEngine(engine, self)

    def pause(self) -> None:
        """Wait (at most `timeout_s`) until the generator is between batches and keep it there;
        pending weights are loaded first, so the engine holds the newest published version."""
        with self._cv:
            self._pause = True
            self._cv.notify_all()
            alive = self._thread is not None and self._thread.is_alive()
            if alive and not self._cv.wait_for(lambda: not self._busy or self._error is not None, timeout=self.timeout_s):
                raise GenerationFailed(f"runtime: the generation thread did not reach a batch boundary within "
                                       f"runtime.timeout_s={self.timeout_s:g} s (it is {self._where})")  # fmt: skip
            if self._error is None:
                self._apply_pending()

    def resume(self) -> None:
        with self._cv:
            self._pause = False
            self._cv.notify_all()

    def state_dict(self) -> dict[str, Any]:
        """The finished batches not yet trained (call while paused)."""
        with self._cv:
            return {"ready": list(self._ready), "next": self._next}

    def load_state_dict(self, state: dict[str, Any], version: int) -> None:
        """Before `start`: the batches a checkpoint carried, at trained version `version`."""
        ready = list(state.get("ready", []))
        self._ready = deque(ready)
        self._next = int(state.get("next", version + len(ready)))
        self._published = self._applied = version
        self.gate.restore(version, carried=len(ready))

    def close(self) -> None:
        """Stop the thread (waits at most `timeout_s` for a running batch; the thread is a daemon)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s)

    # ------------------------------------------------------------------ generator side
    def _at_limit(self, k: int) -> bool:
        return self._limit is not None and k >= self._limit

    def _raise_error(self) -> None:
        if self._error is not None:
            e = self._error
            raise GenerationFailed(f"runtime: the generation thread failed {self._where}: {type(e).__name__}: "
                                   f"{' '.join(str(e).split())}") from e  # fmt: skip

    def _apply_pending(self) -> None:
        """Load the newest published weights into the engine (generator thread, or a paused caller)."""
        if self._pending is not None:
            weights, version = self._pending
            self._pending = None
            out = self._load(weights, version)
            if isinstance(out, dict):  # a Ray engine reports its transfer (weight_sync/bytes, time/weight_sync)
                self._sync_metrics = out
        self._applied = self._published

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    k = self._next
                    self._where = f"waiting to admit batch {k}"
                    t0, waited = time.perf_counter(), False
                    while not self._stop and (self._pause or self._at_limit(k) or not self.gate.admit(self._published)):
                        waited = waited or not (self._pause or self._at_limit(k))
                        self._cv.wait()
                    if self._stop:
                        return
                    if waited:
                        self.paused_waits += 1
                        self._paced_s += time.perf_counter() - t0
                    self._busy = True
                    self._where = f"loading weights version {self._published} before batch {k}"
                    self._apply_pending()
                    version = self._applied
                    self._counts = _zero_counts()
                    self._where = f"generating batch {k} (step {k + 1}) at policy version {version}"
                batch, metrics = self._produce(k, version)
                metrics, self._sync_metrics = {**metrics, **self._sync_metrics}, {}  # the load before this batch
                with self._cv:
                    if self.interrupt_on_update:
                        metrics = {**metrics, **{f"async/{key}": float(v) for key, v in self._counts.items()}}
                    self.gate.finish()
                    self._ready.append((k, batch, metrics, version))
                    self._next = k + 1
                    self._busy = False
                    self._cv.notify_all()
        except BaseException as e:  # surfaces in the trainer's thread (next_batch / pause)
            with self._cv:
                self._error = e
                self._busy = False
                self._cv.notify_all()

    def _generate(self, prompts, n: int, sampling) -> Any:
        """`generate` on the generator thread with interruption: newest weights first; after a cut,
        load the weights that caused it and continue the "abort" rows (fresh seed per round)."""
        gen, rounds = None, 0
        while gen is None or ABORT in gen.finish_reason:
            with self._cv:
                if gen is not None:
                    rounds += 1
                    cut = [i for i, r in enumerate(gen.finish_reason) if r == ABORT]
                    self._counts["interrupts"] += 1
                    self._counts["interrupted_rows"] += len(cut)
                    self._counts["carried_tokens"] += int(gen.lengths[cut].sum())
                self._apply_pending()
                self._generating = True
            try:
                if gen is None:
                    gen = self._engine.generate(prompts, n, sampling)
                else:
                    seed = None if sampling.seed is None else (sampling.seed * 1_000_003 + rounds) % 2**62
                    gen = continue_generation(self._engine, gen, dataclasses.replace(sampling, seed=seed))
            finally:
                with self._cv:
                    self._generating = False
        return gen


def _zero_counts() -> dict[str, int]:
    """Per batch: publishes that interrupted a generate call (`requested`), generate calls cut short
    (`interrupts`), rows cut and continued, and the tokens they carried over the update (kept, not
    regenerated)."""
    return {"requested": 0, "interrupts": 0, "interrupted_rows": 0, "carried_tokens": 0}


class _UpdatingEngine:
    """The engine as a rollout strategy sees it under `interrupt_on_update`: `generate` goes through
    the executor (interrupted by a publish, continued under the new weights); every other member is
    the engine's."""

    def __init__(self, engine: Any, executor: ThreadExecutor):
        self._engine, self._executor = engine, executor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, prompts, n: int, sampling) -> Any:
        return self._executor._generate(prompts, n, sampling)
