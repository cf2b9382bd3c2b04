"""A small process pool for reward calls whose hung workers are killed and replaced.

Why not concurrent.futures: a ProcessPoolExecutor cannot kill one hung call (the whole pool breaks).
Each worker here is a process with its own pipe; the parent sends it one job (a chunk of the batch
for one reward), waits with that job's deadline, and on a timeout kills the worker's process group
and starts a fresh one. Workers start with the "forkserver" context by default (preloading
covey.rewards), so torch's threads in the parent are never forked and a restart costs milliseconds.
Workers cache built rewards, so each reward's definition crosses the pipe once per worker.
Reward calls run in the worker's main thread (math-verify's signal.alarm needs that).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from covey.rewards._scoring import ChunkOutcome, score_chunk

__all__ = ["Job", "WorkerPool"]


@dataclass
class Job:
    key: int  # which reward
    payload: bytes  # pickled ("spec", name, params) or ("object", reward)
    args: tuple  # (prompts, completions, columns, units)
    timeout_s: float


@dataclass
class _Worker:
    proc: multiprocessing.Process
    conn: object
    loaded: set = field(default_factory=set)


def _build(payload: bytes):
    kind, *rest = pickle.loads(payload)
    if kind == "spec":
        from covey.rewards.registry import get_reward

        name, params = rest
        return get_reward(name, **params)
    return rest[0]


def _worker_main(conn) -> None:
    os.setpgid(0, 0)  # our own group: the parent kills it whole (with any children we started)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    payloads: dict[int, bytes] = {}
    built: dict[int, object] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if msg is None:
            return
        key, payload, args = msg
        if payload is not None:
            payloads[key] = payload
            built.pop(key, None)
        try:
            if key not in built:
                built[key] = _build(payloads[key])
            outcome = score_chunk(built[key], *args)
        except Exception:  # noqa: BLE001 - building the reward failed: every sample fails
            import traceback

            n = len(args[1])
            outcome = ChunkOutcome([None] * n, ["exception"] * n, {"exception": traceback.format_exc()})
        conn.send(outcome)


class WorkerPool:
    """`n` worker processes; `run(jobs)` returns one ChunkOutcome, "timeout" or ("crash", msg) per job."""

    def __init__(self, n: int, context: str = "forkserver"):
        if n < 1:
            raise ValueError(f"WorkerPool needs n >= 1 workers, got {n}")
        if context not in multiprocessing.get_all_start_methods():
            raise ValueError(f"mp_context {context!r} is not available; allowed: {multiprocessing.get_all_start_methods()}")
        self._ctx = multiprocessing.get_context(context)
        if context == "forkserver":
            self._ctx.set_forkserver_preload(["covey.rewards"])
        self._workers = [self._start() for _ in range(n)]
        self.restarts = 0

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, args=(child,), name="covey-reward-worker", daemon=False)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def _kill(self, w: _Worker) -> None:
        for target in (lambda: os.killpg(w.proc.pid, signal.SIGKILL), w.proc.kill):
            try:
                target()
            except (ProcessLookupError, PermissionError, OSError):
                pass
        w.proc.join(5.0)
        w.conn.close()

    def _replace(self, i: int) -> None:
        self._kill(self._workers[i])
        self._workers[i] = self._start()
        self.restarts += 1

    def run(self, jobs: list[Job]) -> list:
        results: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (job index, deadline)
        while pending or busy:
            for wi in range(len(self._workers)):
                if wi in busy or not pending:
                    continue
                if not self._workers[wi].proc.is_alive():  # died while idle (e.g. killed from outside)
                    self._replace(wi)
                ji = pending.popleft()
                job, w = jobs[ji], self._workers[wi]
                payload = None if job.key in w.loaded else job.payload
                try:
                    w.conn.send((job.key, payload, job.args))
                except (BrokenPipeError, OSError):  # died while idle: replace it and retry the job
                    self._replace(wi)
                    pending.appendleft(ji)
                    continue
                w.loaded.add(job.key)
                busy[wi] = (ji, time.monotonic() + job.timeout_s)
            if not busy:
                continue
            now = time.monotonic()
            timeout = max(0.0, min(d for _, d in busy.values()) - now)
            ready = wait([self._workers[wi].conn for wi in busy], timeout=timeout)
            for wi in list(busy):
                w = self._workers[wi]
                ji, deadline = busy[wi]
                if w.conn in ready:
                    try:
                        results[ji] = w.conn.recv()
                    except (EOFError, OSError):
                        code = w.proc.exitcode if w.proc.join(1.0) is None else None
                        results[ji] = ("crash", f"reward worker died (exit code {code}) while scoring")
                        self._replace(wi)
                    del busy[wi]
                elif time.monotonic() >= deadline:
                    results[ji] = "timeout"
                    self._replace(wi)
                    del busy[wi]
        return results

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for w in self._workers:
            w.proc.join(2.0)
            if w.proc.is_alive():
                self._kill(w)
            else:
                w.conn.close()
        self._workers = []
