"""Call one reward on one chunk and turn whatever happens into per-sample values and failure kinds.

Shared by the in-process path and the worker processes of `runner.py`. An async reward (``async def``,
as TRL allows) is awaited here on its own event loop, within the same timeout. A call that raises or times
out is retried on smaller pieces so one bad completion does not fail its neighbours: on single
samples, or on whole groups for rewards marked ``group_aware = True``. With a timeout, no retry starts
after RETRY_BUDGET x timeout_s: a reward that hangs on everything must not cost one timeout per
sample; the samples not reached keep the chunk's failure kind. Per sample, a score that is None means
"this reward does not apply to this sample" (TRL's multi-task convention): status ``none``
(`NOT_APPLICABLE`), which is not a failure. Failures: NaN or +-inf ``nan``; finite but beyond float32
(|x| > 3.4e38) ``overflow``; not a number (a string, a list) ``exception``. A return that is not one score per completion (wrong
length, or not a sequence) is a bug in the reward, not noise: `ChunkOutcome.fatal` says so and the
runner raises.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import math
import threading
import time
import traceback
from dataclasses import dataclass, field

from covey.rewards._deadline import CallTimeout, abandon_after, time_limit

__all__ = ["ChunkOutcome", "FAILURE_KINDS", "NOT_APPLICABLE", "RewardOutput", "score_chunk"]

FAILURE_KINDS = ("exception", "timeout", "nan", "overflow")
NOT_APPLICABLE = "none"  # the status of a sample the reward returned None for: not scored, not failed
FLOAT32_MAX = 3.4028234663852886e38  # torch refuses to store anything larger in a float32 tensor
ABANDON_GRACE_S = 0.1  # off the main thread: how long past its limit a call's helper thread is waited for
RETRY_BUDGET = 2  # re-scoring a failed chunk piece by piece starts no call after RETRY_BUDGET x timeout_s


class RewardOutput(list):
    """What a reward may return instead of a plain list: the scores (it IS that list, so callers that
    expect TRL's plain list still work) plus metric samples in `.metrics`.

    metrics: name -> list of values (e.g. one per group); the runner logs the mean of all values
    gathered over the batch as ``reward/<reward>/<name>``.
    """

    def __init__(self, scores, metrics: dict[str, list[float]] | None = None):
        super().__init__(scores)
        self.metrics = dict(metrics or {})

    @property
    def scores(self) -> list:
        return list(self)

    def __reduce__(self):  # pickles across worker processes with its metrics
        return (RewardOutput, (list(self), self.metrics))


@dataclass
class ChunkOutcome:
    """values[i] is a finite float or None; kinds[i] is None (scored), a failure kind, or NOT_APPLICABLE
    (the reward returned None); tracebacks: first note per failure kind.

    fatal: set when the reward broke its contract (e.g. returned 3 scores for 4 completions); the
    runner raises it instead of using any value.
    """

    values: list[float | None]
    kinds: list[str | None]
    tracebacks: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    fatal: str | None = None


class BadReturn(Exception):
    """The reward's return value is not one score per completion."""


def _validate(out, n: int):
    """(values, kinds, notes, metrics) of one return value; raises BadReturn for the wrong shape."""
    metrics: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    if isinstance(out, RewardOutput):
        metrics, bad = _numeric_metrics(out.metrics)
        if bad:
            notes["metric"] = bad
        out = out.scores
    if hasattr(out, "tolist"):  # tensors and arrays
        out = out.tolist()
    if out is None or isinstance(out, (str, bytes, dict)) or not hasattr(out, "__iter__"):
        raise BadReturn(f"returned {type(out).__name__} instead of a list of {n} scores")
    out = list(out)
    if len(out) != n:
        raise BadReturn(f"returned {len(out)} scores for {n} completions")
    values: list[float | None] = [None] * n
    kinds: list[str | None] = [None] * n
    for i, v in enumerate(out):
        if v is None:
            kinds[i] = NOT_APPLICABLE
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            kinds[i] = "exception"
            notes.setdefault("exception", f"the reward returned a non-number score {v!r} ({type(v).__name__}) "
                                          f"for sample {i}")
            continue
        if not math.isfinite(f):  # NaN and +-inf alike: neither can enter an advantage
            kinds[i] = "nan"
            notes.setdefault("nan", f"the reward returned {f} for sample {i}")
        elif abs(f) > FLOAT32_MAX:
            kinds[i] = "overflow"
            notes.setdefault("overflow", f"the reward returned {f!r} for sample {i}, beyond float32's range")
        else:
            values[i] = f
    return values, kinds, notes, metrics


def _await(out):
    """The result of an async reward (``async def``, or a callable returning an awaitable), run to the end
    on a fresh event loop; plain results pass through. Inside a running loop (a notebook) the coroutine
    runs on a loop in a helper thread, since asyncio.run cannot nest."""
    if not inspect.isawaitable(out):
        return out

    async def wait():
        return await out

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def _numeric_metrics(raw) -> tuple[dict[str, list[float]], str]:
    """(the metrics whose values are all finite numbers, a note naming the first one that is not): a NaN or
    infinite value drops its metric with a note; a value that is not a number (a string, None, a list) is
    the reward's bug, BadReturn (fatal: RewardReturnError names the reward)."""
    if not isinstance(raw, dict):
        raise BadReturn(f"returned RewardOutput metrics of type {type(raw).__name__}, not a dict of name -> numbers")
    metrics, bad = {}, ""
    for name, vals in raw.items():
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        if not isinstance(name, str):
            raise BadReturn(f"returned a metric named {name!r:.40}, not a string")
        nums = []
        for v in vals:
            try:
                if isinstance(v, (str, bytes)) or v is None:
                    raise TypeError
                nums.append(float(v))  # numbers, numpy scalars and bools
            except (TypeError, ValueError):
                raise BadReturn(f"returned metric {name[:40]!r} with a value {v!r:.60} ({type(v).__name__}) that is "
                                "not a number") from None
        if not all(math.isfinite(v) for v in nums):
            bad = bad or f"metric {name!r} has a value that is not a finite number ({vals!r:.100}); it is not logged"
            continue
        metrics[name] = nums
    return metrics, bad


def _call(fn, kwargs: dict, idx: list[int] | None, timeout_s: float | None, isolated: bool):
    """Call `fn` on the samples `idx` (None = all); returns its raw output or a failure kind. Off the main
    thread a limited call runs in a helper thread that is not waited for past the limit (`abandon_after`)."""
    sub = kwargs if idx is None else {k: [v[i] for i in idx] for k, v in kwargs.items()}

    def call():
        with time_limit(timeout_s) if timeout_s else contextlib.nullcontext():
            return _await(fn(**sub))

    try:
        if timeout_s and threading.current_thread() is not threading.main_thread():
            done, out = abandon_after(call, timeout_s + ABANDON_GRACE_S)
            return (out, None) if done else (None, "timeout")
        return call(), None
    except CallTimeout:
        return None, "timeout"
    except Exception:  # noqa: BLE001 - a failing reward must not stop training
        return traceback.format_exc(), "exception"
    except BaseException:  # SystemExit and friends: fatal in the caller's process, a failure in a worker
        if not isolated:
            raise
        return traceback.format_exc(), "exception"


def score_chunk(fn, kwargs: dict, n: int, units: list[list[int]], *, timeout_s: float | None = None,
                isolated: bool = False) -> ChunkOutcome:
    """Score one chunk of `n` samples; `kwargs` holds the reward's arguments (lists of length n).

    units: partition of range(n) into the pieces a retry may use. timeout_s: limit of each call in this
    process (None: none; workers are limited by their parent instead). isolated: True in a worker, where
    SystemExit & co. count as exceptions; in the caller's process they propagate.
    """
    if n == 0:
        return ChunkOutcome([], [])
    try:
        out, kind = _call(fn, kwargs, None, timeout_s, isolated)
        if kind is None:
            values, kinds, notes, metrics = _validate(out, n)
            return ChunkOutcome(values, kinds, notes, metrics)
        if len(units) <= 1:
            msg = out if kind == "exception" else _timeout_note(timeout_s, n)
            return ChunkOutcome([None] * n, [kind] * n, {kind: msg})
        values: list[float | None] = [None] * n
        kinds: list[str | None] = [kind] * n
        notes: dict[str, str] = {}
        metrics: dict[str, list[float]] = {}
        give_up = time.monotonic() + RETRY_BUDGET * timeout_s if timeout_s else math.inf
        for unit in units:
            if time.monotonic() > give_up:  # the rest keep the chunk's failure kind
                notes.setdefault(kind, f"{kind}: not re-scored alone, re-scoring this chunk ran past its budget "
                                       f"({RETRY_BUDGET} x timeout_s)")
                continue
            out, ukind = _call(fn, kwargs, unit, timeout_s, isolated)
            if ukind is not None:
                notes.setdefault(ukind, out if ukind == "exception" else _timeout_note(timeout_s, len(unit)))
                for i in unit:
                    kinds[i] = ukind
                continue
            v, k, unotes, m = _validate(out, len(unit))
            for j, i in enumerate(unit):
                values[i], kinds[i] = v[j], k[j]
            for key, note in unotes.items():
                notes.setdefault(key, note)
            for name, vals in m.items():
                metrics.setdefault(name, []).extend(vals)
        return ChunkOutcome(values, kinds, notes, metrics)
    except BadReturn as e:
        return ChunkOutcome([None] * n, ["exception"] * n, fatal=str(e))


def _timeout_note(timeout_s: float | None, size: int) -> str:
    return f"the reward did not return within timeout_s={timeout_s} on {size} sample(s)"
