"""Score a batch with K reward functions: the `rewards[N, K]` matrix, names, weights and weighted sum.

Each reward is called as ``fn(prompts=..., completions=..., **columns)`` (keywords only, like TRL).
Columns are the dataset item's extra keys (lists of length N) plus, when the caller passes group ids,
``group`` (list of N ints: equal ids = completions of the same prompt; group-aware rewards such as
majority vote need it). The batch is cut into chunks of whole groups; chunks of all rewards run in
parallel worker processes (`_pool.py`), each call bounded by its reward's ``timeout_s``.

Failures never stop a step: a sample whose score is missing gets the reward's ``fallback`` (0.0), is
flagged in `RewardBatch.failed`, and is counted under ``reward/<name>/failures/<kind>`` with kinds
exception (raised, wrong length, non-number), timeout (the chunk's call passed timeout_s: every sample
of the chunk), nan (non-finite) and none (None). The first traceback of each kind of each reward is
logged once. A reward that fails on EVERY sample for `max_failed_steps` consecutive calls raises
`RewardFailure` with its name and last traceback: a reward that never works is a bug, not noise.
Metrics a reward returns through `RewardOutput` are logged as ``reward/<name>/<metric>`` (mean).
"""

from __future__ import annotations

import logging
import math
import pickle
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import Tensor

from covey.rewards._pool import Job, WorkerPool
from covey.rewards._scoring import FAILURE_KINDS, ChunkOutcome, score_chunk
from covey.rewards.registry import get_reward

__all__ = ["RewardBatch", "RewardFailure", "RewardRunner", "RewardSpec"]

log = logging.getLogger(__name__)


class RewardSpec(BaseModel):
    """One reward in a config: ``{name, weight, params, timeout_s, fallback, alias, in_process}``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """A registered reward (`covey.rewards.REWARDS`) or an import path 'package.module:function'."""
    weight: float = 1.0
    """Weight in the scalar reward (the weighted sum); GDPO-style methods read the columns instead."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword parameters of the reward (a class's constructor or a function's keyword args)."""
    timeout_s: float = Field(60.0, gt=0)
    """Limit for one call on one chunk; a call over it is killed and its samples get the fallback."""
    fallback: float = 0.0
    """Score given to a sample whose reward failed."""
    alias: str | None = None
    """Column name (default: the name, or the function name of an import path); must be unique."""
    in_process: bool = False
    """Run in the calling process (no worker, so no timeout): for cheap rewards."""

    @field_validator("fallback", "weight")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"must be finite, got {v}")
        return v

    @property
    def label(self) -> str:
        return self.alias or self.name.rpartition(":")[2].rpartition(".")[2]


class RewardFailure(RuntimeError):
    """A reward failed on every sample for `max_failed_steps` consecutive steps."""


@dataclass
class RewardBatch:
    """Scores of one batch. Shapes: N samples, K rewards.

    rewards: [N, K] float32, failed entries hold the reward's fallback.
    names: the K column names; weights: [K] float32; total: [N] float32 = rewards @ weights.
    failed: [N, K] bool, True where the fallback was used.
    metrics: ``reward/<name>/{mean,std,failures,failures/<kind>,<reward metric>}``, ``reward/total/mean``.
    """

    rewards: Tensor
    names: tuple[str, ...]
    weights: Tensor
    total: Tensor
    failed: Tensor
    metrics: dict[str, float]

    def apply_to(self, rollouts) -> None:
        """Write rewards, reward_names and reward_weights into a `Rollouts` batch."""
        rollouts.rewards = self.rewards
        rollouts.reward_names = self.names
        rollouts.reward_weights = self.weights


@dataclass
class _Entry:
    label: str
    weight: float
    timeout_s: float
    fallback: float
    in_process: bool
    fn: Callable
    payload: bytes
    group_aware: bool


class RewardRunner:
    """Runs K rewards over batches in `workers` processes (0 = everything in the calling process).

    rewards: RewardSpec / dicts of its fields / plain callables (weight 1, default timeout; they must
        be picklable, i.e. module-level, unless run with workers=0) / (callable, RewardSpec) pairs
        (a ready callable configured by the spec's weight, alias, timeout and fallback; its name is the label).
    chunk_size: samples per call (rounded to whole groups); None = one chunk per worker.
    mp_context: multiprocessing start method for workers ("forkserver" or "spawn"; not "fork",
        which would copy torch's threads).

    >>> runner = RewardRunner([{"name": "format", "params": {"tags": ["answer"]}, "weight": 0.5}], workers=0)
    >>> batch = runner(["q", "q"], ["<answer>1</answer>", "1"])
    >>> batch.rewards.tolist(), batch.names, batch.total.tolist()
    ([[1.0], [0.0]], ('format',), [0.5, 0.0])
    """

    def __init__(
        self,
        rewards: Sequence[RewardSpec | dict | Callable],
        *,
        workers: int = 2,
        max_failed_steps: int = 3,
        chunk_size: int | None = None,
        mp_context: str = "forkserver",
    ):
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if max_failed_steps < 1:
            raise ValueError(f"max_failed_steps must be >= 1, got {max_failed_steps}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
        if mp_context == "fork":
            raise ValueError("mp_context 'fork' would copy the parent's threads; use 'forkserver' or 'spawn'")
        if not rewards:
            raise ValueError("RewardRunner needs at least one reward")
        self.entries = [self._entry(r, workers) for r in rewards]
        labels = [e.label for e in self.entries]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"reward names must be unique, {dupes} repeat; give each an 'alias'")
        if "total" in labels:
            raise ValueError("'total' is reserved for the weighted sum; give that reward another alias")
        self.names = tuple(labels)
        self.weights = torch.tensor([e.weight for e in self.entries], dtype=torch.float32)
        self.workers, self.max_failed_steps, self.chunk_size = workers, max_failed_steps, chunk_size
        self._mp_context = mp_context
        self._pool: WorkerPool | None = None
        self._finalizer = None
        self._bad_steps = [0] * len(self.entries)
        self._logged: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _entry(r, workers: int) -> _Entry:
        if isinstance(r, tuple):  # (callable, RewardSpec): a ready function with its config, e.g. a task's verifier
            r, spec = r
        elif callable(r) and not isinstance(r, (dict, RewardSpec)):
            spec = RewardSpec(name=getattr(r, "__name__", type(r).__name__), in_process=workers == 0)
        if callable(r) and not isinstance(r, (dict, RewardSpec)):
            fn = r
            payload = None
            if not (spec.in_process or workers == 0):
                try:
                    payload = pickle.dumps(("object", r))
                except Exception as e:  # noqa: BLE001 - pickling errors come in many types
                    raise ValueError(
                        f"reward {spec.label!r} cannot be sent to worker processes ({e}); define it at module "
                        "level, name it as 'package.module:function', or use workers=0"
                    ) from None
        else:
            spec = r if isinstance(r, RewardSpec) else RewardSpec(**r)
            fn = get_reward(spec.name, **spec.params)  # fails now, before any model loads
            payload = pickle.dumps(("spec", spec.name, spec.params))
        return _Entry(
            label=spec.label,
            weight=spec.weight,
            timeout_s=spec.timeout_s,
            fallback=spec.fallback,
            in_process=spec.in_process or workers == 0,
            fn=fn,
            payload=payload,
            group_aware=bool(getattr(fn, "group_aware", False)),
        )

    def _get_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self.workers, self._mp_context)
            self._finalizer = weakref.finalize(self, WorkerPool.close, self._pool)
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (also done at exit and when the runner is garbage-collected)."""
        if self._finalizer is not None:
            self._finalizer()
        self._pool = None

    def __enter__(self) -> RewardRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ scoring
    def __call__(self, prompts: Sequence, completions: Sequence, *, group=None, **columns) -> RewardBatch:
        """Score N completions. `group`: N group ids (list or tensor) or None; columns: lists of length N."""
        start = time.monotonic()
        n = len(completions)
        prompts, completions = list(prompts), list(completions)
        if len(prompts) != n:
            raise ValueError(f"got {len(prompts)} prompts for {n} completions; pass one prompt per completion")
        cols = {}
        for name, col in columns.items():
            col = col.tolist() if hasattr(col, "tolist") else list(col)
            if len(col) != n:
                raise ValueError(f"column {name!r} has {len(col)} entries but there are {n} completions")
            cols[name] = col
        if group is not None:
            group = group.tolist() if hasattr(group, "tolist") else list(group)
            if len(group) != n:
                raise ValueError(f"group has {len(group)} entries but there are {n} completions")
            cols["group"] = [int(g) for g in group]
        chunks = self._chunks(n, cols.get("group"))

        K = len(self.entries)
        outcomes: list[list] = [[None] * len(chunks) for _ in range(K)]
        jobs, slots = [], []
        for k, e in enumerate(self.entries):
            if e.in_process:
                continue
            for c, idx in enumerate(chunks):
                jobs.append(Job(k, e.payload, self._args(prompts, completions, cols, idx, e.group_aware), e.timeout_s))
                slots.append((k, c))
        for k, e in enumerate(self.entries):  # cheap rewards run here, while nothing else is waiting
            if e.in_process:
                for c, idx in enumerate(chunks):
                    outcomes[k][c] = score_chunk(e.fn, *self._args(prompts, completions, cols, idx, e.group_aware))
        if jobs:
            for (k, c), res in zip(slots, self._get_pool().run(jobs)):
                outcomes[k][c] = res
        batch = self._assemble(n, chunks, outcomes)
        batch.metrics["reward/seconds"] = time.monotonic() - start
        return batch

    def _chunks(self, n: int, group: list[int] | None) -> list[list[int]]:
        """Index lists of whole groups (samples alone when no groups), about n / n_chunks each."""
        if group is None:
            units = [[i] for i in range(n)]
        else:
            by_group: dict[int, list[int]] = {}
            for i, g in enumerate(group):
                by_group.setdefault(g, []).append(i)
            units = list(by_group.values())
        if n == 0:
            return []
        target = self.chunk_size or max(1, math.ceil(n / max(1, self.workers)))
        chunks, cur = [], []
        for unit in units:
            cur = cur + unit
            if len(cur) >= target:
                chunks.append(cur)
                cur = []
        if cur:
            chunks.append(cur)
        return chunks

    @staticmethod
    def _args(prompts, completions, cols, idx, group_aware):
        sub = {k: [v[i] for i in idx] for k, v in cols.items()}
        if group_aware and "group" in sub:
            local: dict[int, list[int]] = {}
            for j, g in enumerate(sub["group"]):
                local.setdefault(g, []).append(j)
            units = list(local.values())
        else:
            units = [[j] for j in range(len(idx))]
        return [prompts[i] for i in idx], [completions[i] for i in idx], sub, units

    def _assemble(self, n: int, chunks, outcomes) -> RewardBatch:
        K = len(self.entries)
        rewards = torch.zeros(n, K, dtype=torch.float32)
        failed = torch.zeros(n, K, dtype=torch.bool)
        metrics: dict[str, float] = {}
        for k, e in enumerate(self.entries):
            counts = dict.fromkeys(FAILURE_KINDS, 0)
            tracebacks: dict[str, str] = {}
            extra: dict[str, list[float]] = {}
            for idx, res in zip(chunks, outcomes[k]):
                res = self._as_outcome(res, e, len(idx))
                for j, i in enumerate(idx):
                    v, kind = res.values[j], res.kinds[j]
                    if kind is None and v is not None:
                        rewards[i, k] = v
                    else:
                        rewards[i, k] = e.fallback
                        failed[i, k] = True
                        counts[kind or "none"] += 1
                for kind, tb in res.tracebacks.items():
                    tracebacks.setdefault(kind, tb)
                for name, vals in res.metrics.items():
                    extra.setdefault(name, []).extend(vals)
            for kind, tb in tracebacks.items():
                if counts.get(kind) and (e.label, kind) not in self._logged:
                    self._logged.add((e.label, kind))
                    log.warning("reward %r failed (%s); its sample(s) got fallback %s. First error:\n%s",
                                e.label, kind, e.fallback, tb)
            col = rewards[:, k]
            metrics[f"reward/{e.label}/mean"] = col.mean().item() if n else 0.0
            metrics[f"reward/{e.label}/std"] = col.std(unbiased=False).item() if n else 0.0
            metrics[f"reward/{e.label}/failures"] = float(sum(counts.values()))
            for kind, c in counts.items():
                metrics[f"reward/{e.label}/failures/{kind}"] = float(c)
            for name, vals in extra.items():
                if vals:
                    metrics[f"reward/{e.label}/{name}"] = sum(vals) / len(vals)
            self._track(k, e, n, failed[:, k], counts, tracebacks)
        total = rewards @ self.weights  # [N, K] @ [K] -> [N]
        metrics["reward/total/mean"] = total.mean().item() if n else 0.0
        return RewardBatch(rewards, self.names, self.weights.clone(), total, failed, metrics)

    @staticmethod
    def _as_outcome(res, e: _Entry, size: int) -> ChunkOutcome:
        if isinstance(res, ChunkOutcome):
            return res
        if res == "timeout":
            msg = (f"reward {e.label!r} did not return within timeout_s={e.timeout_s} on a chunk of {size} "
                   "samples; its worker was killed and replaced")
            return ChunkOutcome([None] * size, ["timeout"] * size, {"timeout": msg})
        return ChunkOutcome([None] * size, ["exception"] * size, {"exception": res[1]})

    def _track(self, k: int, e: _Entry, n: int, failed_col: Tensor, counts, tracebacks) -> None:
        if n == 0 or not bool(failed_col.all()):
            self._bad_steps[k] = 0
            return
        self._bad_steps[k] += 1
        if self._bad_steps[k] >= self.max_failed_steps:
            kinds = ", ".join(f"{c} {kind}" for kind, c in counts.items() if c)
            last = next(iter(tracebacks.values()), "")
            raise RewardFailure(
                f"reward {e.label!r} failed on every sample for {self._bad_steps[k]} consecutive steps "
                f"({kinds} in the last one); fix it or remove it from the config. Last error:\n{last}"
            )
