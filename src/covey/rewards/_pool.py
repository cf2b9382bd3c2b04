"""A small process pool for reward calls whose hung workers are killed and replaced.

Why not concurrent.futures: a ProcessPoolExecutor cannot kill one hung call (the whole pool breaks).
Each worker here is a process with its own pipe; the parent sends it one job (a chunk of the batch
for one reward), waits with that job's deadline, and on a timeout kills the worker and starts a fresh
one. Workers start with the "forkserver" context by default (preloading covey.rewards), so torch's
threads in the parent are never forked and a restart costs milliseconds. Workers cache built
rewards, so each reward's definition crosses the pipe once per worker. Reward calls run in the
worker's main thread (math-verify's signal.alarm needs that).

Processes a reward starts die with their worker: each worker leads its own session (process group),
and every way a worker ends (timeout, crash, `close`, interpreter exit, the parent vanishing) kills
that whole group. A child that starts its own session (``start_new_session=True``) leaves the group
and is not tracked.

Workers never run the user's script: multiprocessing normally re-imports the parent's ``__main__``
in each child (``init_main_from_path`` / ``init_main_from_name`` in `spawn.get_preparation_data`,
executed by ``spawn._fixup_main_from_path``), so a script without an ``if __name__ == "__main__":``
guard would run again in every worker. For processes named `WORKER_NAME` those two keys are dropped;
rewards reach workers by importable reference only (`runner.py` keeps ``__main__`` callables
in-process).
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.spawn
import multiprocessing.util  # noqa: F401 - imported before our atexit hook so that hook runs first
import os
import pickle
import signal
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from covey.rewards._deadline import capped_prints
from covey.rewards._scoring import ChunkOutcome, score_chunk

__all__ = ["Job", "WORKER_NAME", "WorkerPool", "run_job"]

WORKER_NAME = "covey-reward-worker"


@dataclass
class Job:
    key: int  # which reward
    payload: bytes  # pickled ("spec", name, params) or ("object", reward)
    args: tuple  # (kwargs, n, units), see score_chunk
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


def _end_group() -> None:
    """Kill this worker's process group: the worker itself and every process a reward started."""
    os.killpg(0, signal.SIGKILL)


def _worker_main(conn) -> None:
    os.setsid()  # our own session and group: whoever ends us ends the reward's children too
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    payloads: dict[int, bytes] = {}
    built: dict[int, object] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            _end_group()  # the parent is gone
        if msg is None:
            _end_group()
        key, payload, args = msg
        outcome = run_job(payloads, built, key, payload, args)
        try:
            conn.send(outcome)
        except (BrokenPipeError, OSError):
            _end_group()


def run_job(payloads: dict, built: dict, key: int, payload: bytes | None, args: tuple) -> ChunkOutcome:
    """Score one job in a worker (a pool process or a Ray reward actor): build reward `key` from its
    payload once (cached in `built`; a new payload replaces it), then `score_chunk` in isolation."""
    if payload is not None:
        payloads[key] = payload
        built.pop(key, None)
    try:
        if key not in built:
            built[key] = _build(payloads[key])
    except Exception:  # noqa: BLE001 - building the reward failed: every sample fails
        import traceback

        n = args[1]
        return ChunkOutcome([None] * n, ["exception"] * n, {"exception": traceback.format_exc()})
    with capped_prints(getattr(built[key], "__name__", type(built[key]).__name__)):
        return score_chunk(built[key], *args, isolated=True)


# ------------------------------------------------------------ starting workers without the user's __main__
_original_preparation_data = multiprocessing.spawn.get_preparation_data
_patch_lock = threading.Lock()


def _preparation_data(name):
    data = _original_preparation_data(name)
    if name == WORKER_NAME:
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


def _start_without_main(proc: multiprocessing.Process) -> None:
    """proc.start(), with multiprocessing told not to re-import ``__main__`` in our worker (see above).

    The patch is in place only while starting and touches only processes named WORKER_NAME, so other
    threads starting their own processes meanwhile are unaffected."""
    with _patch_lock:
        multiprocessing.spawn.get_preparation_data = _preparation_data
        try:
            proc.start()
        finally:
            multiprocessing.spawn.get_preparation_data = _original_preparation_data


_live_pools: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    # registered after multiprocessing.util's own exit hook, so it runs BEFORE that hook joins
    # non-daemon children (our idle workers would otherwise keep the interpreter from exiting)
    for pool in list(_live_pools):
        pool.close()


class WorkerPool:
    """`n` worker processes; `run(jobs)` returns one ChunkOutcome, "timeout", "skipped" or ("crash", msg) per job."""

    def __init__(self, n: int, context: str = "forkserver"):
        if n < 1:
            raise ValueError(f"WorkerPool needs n >= 1 workers, got {n}")
        if context not in multiprocessing.get_all_start_methods():
            raise ValueError(f"mp_context {context!r} is not available; allowed: {multiprocessing.get_all_start_methods()}")
        self._ctx = multiprocessing.get_context(context)
        if context == "forkserver":
            self._ctx.set_forkserver_preload(["covey.rewards"])
        self._workers: list[_Worker] = []
        _live_pools.add(self)
        self._workers = [self._start() for _ in range(n)]
        self.restarts = 0

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        # not daemonic: a daemonic worker could not run rewards that use multiprocessing themselves
        proc = self._ctx.Process(target=_worker_main, args=(child,), name=WORKER_NAME, daemon=False)
        _start_without_main(proc)
        child.close()
        return _Worker(proc, parent)

    def _kill(self, w: _Worker) -> None:
        # The group id is the worker's pid. After a crash the worker is gone but the reward's children
        # may remain in its group; the kernel does not hand out that id again while they do, and once
        # they are gone killpg finds nothing (ESRCH).
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if w.proc.is_alive():  # killed before its setsid: not a group leader yet
            w.proc.kill()
        w.proc.join(5.0)
        w.conn.close()

    def _replace(self, i: int) -> None:
        self._kill(self._workers[i])
        self._workers[i] = self._start()
        self.restarts += 1

    def run(self, jobs: list[Job], give_up_s: float | None = None) -> list:
        """Results in job order; jobs not started within `give_up_s` seconds are not run: "skipped"."""
        results: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (job index, deadline)
        give_up = time.monotonic() + give_up_s if give_up_s is not None else None
        while pending or busy:
            if give_up is not None and pending and time.monotonic() > give_up:
                for ji in pending:
                    results[ji] = "skipped"
                pending.clear()
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
                        w.proc.join(1.0)
                        results[ji] = ("crash", f"the reward worker died (exit code {w.proc.exitcode}) while scoring")
                        self._replace(wi)
                    del busy[wi]
                elif time.monotonic() >= deadline:
                    results[ji] = "timeout"
                    self._replace(wi)
                    del busy[wi]
        return results

    def close(self) -> None:
        """Stop every worker and its process group (idempotent)."""
        for w in self._workers:
            try:
                w.conn.send(None)  # the worker answers by killing its own group
            except (BrokenPipeError, OSError):
                pass
        for w in self._workers:
            w.proc.join(2.0)
            self._kill(w)
        self._workers = []
        _live_pools.discard(self)
