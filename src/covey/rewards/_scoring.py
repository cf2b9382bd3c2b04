"""Call one reward on one chunk and turn whatever happens into per-sample values and failure kinds.

Shared by the in-process path and the worker processes of `runner.py`. A call that raises (or returns
the wrong length or a non-number) is retried on smaller pieces so one bad completion does not fail its
neighbours: on single samples, or on whole groups for rewards marked ``group_aware = True``.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field

__all__ = ["ChunkOutcome", "FAILURE_KINDS", "RewardOutput", "score_chunk"]

FAILURE_KINDS = ("exception", "timeout", "nan", "none")


@dataclass
class RewardOutput:
    """What a reward may return instead of a plain list: scores plus metric samples.

    metrics: name -> list of values (e.g. one per group); the runner logs the mean of all values
    gathered over the batch as ``reward/<reward>/<name>``.
    """

    scores: list
    metrics: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class ChunkOutcome:
    """values[i] is a finite float or None (failed); kinds[i] names the failure; tracebacks: first per kind."""

    values: list[float | None]
    kinds: list[str | None]
    tracebacks: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)


def _validate(out, n: int) -> tuple[list[float | None], list[str | None], dict[str, list[float]]]:
    metrics: dict[str, list[float]] = {}
    if isinstance(out, RewardOutput):
        metrics = {k: [float(v) for v in vals] for k, vals in out.metrics.items()}
        out = out.scores
    if hasattr(out, "tolist"):  # tensors and arrays
        out = out.tolist()
    if isinstance(out, (str, bytes)) or not hasattr(out, "__len__"):
        raise TypeError(f"reward returned {type(out).__name__}; expected a list of {n} floats")
    out = list(out)
    if len(out) != n:
        raise ValueError(f"reward returned {len(out)} scores for {n} completions")
    values: list[float | None] = []
    kinds: list[str | None] = []
    for v in out:
        if v is None:
            values.append(None)
            kinds.append("none")
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"reward returned a non-number score {v!r} ({type(v).__name__})") from None
        if math.isfinite(f):
            values.append(f)
            kinds.append(None)
        else:  # NaN and +-inf alike: neither can enter an advantage
            values.append(None)
            kinds.append("nan")
    return values, kinds, metrics


def _call(fn, prompts, completions, columns, idx):
    sub = {k: [v[i] for i in idx] for k, v in columns.items()}
    out = fn(prompts=[prompts[i] for i in idx], completions=[completions[i] for i in idx], **sub)
    return _validate(out, len(idx))


def score_chunk(fn, prompts: list, completions: list, columns: dict, units: list[list[int]]) -> ChunkOutcome:
    """Score one chunk; `units` partitions its local indices into the pieces a retry may use."""
    n = len(completions)
    if n == 0:
        return ChunkOutcome([], [])
    try:
        values, kinds, metrics = _validate(fn(prompts=prompts, completions=completions, **columns), n)
        return ChunkOutcome(values, kinds, _first_tracebacks(kinds, "", values), metrics)
    except Exception:  # noqa: BLE001 - a failing reward must not stop training
        tb = traceback.format_exc()
    if len(units) <= 1:
        return ChunkOutcome([None] * n, ["exception"] * n, {"exception": tb})
    values: list[float | None] = [None] * n
    kinds: list[str | None] = ["exception"] * n
    metrics: dict[str, list[float]] = {}
    first_tb = None
    for unit in units:
        try:
            v, k, m = _call(fn, prompts, completions, columns, unit)
        except Exception:  # noqa: BLE001
            first_tb = first_tb or traceback.format_exc()
            continue
        for j, i in enumerate(unit):
            values[i], kinds[i] = v[j], k[j]
        for name, vals in m.items():
            metrics.setdefault(name, []).extend(vals)
    tracebacks = _first_tracebacks(kinds, first_tb or tb, values)
    return ChunkOutcome(values, kinds, tracebacks, metrics)


def _first_tracebacks(kinds, tb: str, values) -> dict[str, str]:
    out = {}
    for i, kind in enumerate(kinds):
        if kind is None or kind in out:
            continue
        if kind == "exception":
            out[kind] = tb
        else:
            out[kind] = f"the reward returned {'None' if kind == 'none' else 'a non-finite value'} for sample {i}"
    return out
