"""Score a batch with K reward functions: the `rewards[N, K]` matrix, names, weights and weighted sum.

Each reward is called as ``fn(prompts=..., completions=..., **columns)`` (keywords only, like TRL).
Columns are the dataset item's extra keys (lists of length N) plus what the caller adds: ``group``
(N ints: equal ids = completions of the same prompt; group-aware rewards such as majority vote need
it) and ``completion_ids`` (N lists of token ids). A reward without ``**kwargs`` gets only the
arguments its signature names; a required one the batch lacks is an error naming it. As in TRL, when
a prompt is a chat message list the completion arrives as ``[{"role": "assistant", "content": text}]``;
plain prompts get plain string completions.

Group-wise rewards (``group_aware = True``, `covey.rewards.group`) see whole units: the ``group`` column,
or the column their ``group_key`` names (e.g. a paraphrase-set id); their chunks and retry units are cut
along that column, never through a unit. Judges declaring ``audit_against`` get a verifier-agreement
metric (`covey.rewards.judge.audit`).

Where rewards run: the batch is cut into chunks of whole groups; chunks of all rewards run in
parallel worker processes (`_pool.py`), each call bounded by its reward's ``timeout_s``. A reward
runs in the calling process instead when ``in_process=True``, ``workers=0``, or a worker cannot
rebuild it by reference (closures, lambdas, anything from ``__main__``: `_entry.py`); there the same
``timeout_s`` is enforced by a signal in the main thread and, in any other thread (the thread executor
scores in its generator thread), by running the call in a helper thread under an asynchronous exception
and not waiting past the limit (`_deadline.py`: a call blocked in a sleep or read is left behind). Workers never re-run the user's script, and processes a reward
starts die with its worker (timeout, crash, `close`, interpreter exit).

None is not a failure: as in TRL, a reward returns None for a sample it does not apply to (one reward
per task in a multi-task dataset). TRL turns None into NaN and sums the weighted columns with nansum,
so the sample's total comes from the rewards that apply; covey stores 0.0 in that entry (the same
weighted sum), flags it in `RewardBatch.missing`, counts it under ``reward/<name>/none``, and leaves it
out of ``reward/<name>/mean`` and ``/std`` (TRL's nanmean and nanstd; NaN when no sample applied). A
sample that every reward skipped is counted under ``reward/unscorable`` and logged once (TRL warns the
same way); its total is 0.0 (TRL >= 1.x also keeps it out of the group baseline and zeroes its
advantage; covey's advantages see 0.0). None never counts towards `RewardFailure`.

Failures never stop a step: a sample whose score is missing gets the reward's ``fallback`` (0.0), is
flagged in `RewardBatch.failed`, and is counted under ``reward/<name>/failures/<kind>``, kinds:
  exception  the call raised (or the worker died), or the sample's score is not a number
  timeout    the call passed timeout_s; a chunk that times out (or kills its worker) is re-scored one
             sample (one group, for group-aware rewards) at a time, each call with its own timeout_s,
             so only the culprit gets the fallback; re-scoring starts no call after 2 x timeout_s
             (samples not reached keep `timeout`), so a reward that hangs on everything costs at
             most about 4 x timeout_s per step, not one timeout per sample
  nan        NaN or +-inf;  overflow  finite but beyond float32 (e.g. 1e308)
The first traceback of each kind of each reward is logged once. A reward that fails on every sample it
applies to (at least one) for `max_failed_steps` consecutive calls raises `RewardFailure` with its name
and last traceback; a call where it applies to no sample leaves that count as it is.

Bugs stop the run at once, with the reward's name: `RewardReturnError` when a reward returns the
wrong number of scores (or not a list), `RewardCrashed` when an in-process reward raises SystemExit
(``sys.exit``) or another BaseException (KeyboardInterrupt stays KeyboardInterrupt, with a note
naming the reward). ``os._exit`` in an in-process reward raises instead (`_deadline.exit_intercepted`)
and is a `RewardCrashed` too. In a worker those count as exception failures. An in-process reward
that kills the process by a signal (a segfault) takes the run with it: give such rewards a worker.
Metrics a reward returns through `RewardOutput` are logged as ``reward/<name>/<metric>`` (mean); a
metric with a NaN or infinite value is dropped with a warning, and one whose values are not numbers (a
string) is a `RewardReturnError`, in a worker as in this process. A reward that returns None for every
sample of a batch is logged once and counted as ``reward/<name>/none_batch``. Rows whose weighted sum
would be beyond float32 get every reward's fallback and are counted as ``reward/total/overflow``.
A call keeps `_deadline.PRINT_LIMIT` characters of what it prints per stream; processes an
in-process reward left running are killed by `close`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import Field, field_validator
from torch import Tensor

from covey.rewards._deadline import Children, capped_prints, exit_intercepted
from covey.rewards._entry import Entry, build_entry
from covey.rewards._pool import Job, WorkerPool
from covey.registry import Spec
from covey.rewards._scoring import FAILURE_KINDS, FLOAT32_MAX, NOT_APPLICABLE, RETRY_BUDGET, ChunkOutcome, score_chunk
from covey.rewards.judge.audit import audit_verifier
from covey.rewards.registry import reward_caps

__all__ = ["RewardBatch", "RewardCrashed", "RewardFailure", "RewardReturnError", "RewardRunner", "RewardSpec"]

log = logging.getLogger(__name__)


class RewardSpec(Spec):
    """One reward in a config: ``{name, params, weight, timeout_s, fallback, alias, in_process}``
    (`covey.registry.Spec`: parameters as flat keys or under ``params:``)."""

    name: str
    """A registered reward (`covey.rewards.REWARDS`) or an import path 'package.module:function'."""
    weight: float = 1.0
    """Weight in the scalar reward (the weighted sum); GDPO-style methods read the columns instead."""
    timeout_s: float = Field(60.0, gt=0)
    """Limit for one call (a chunk, or one sample when a timed-out chunk is re-scored); a call over it is
    stopped (its worker killed) and its samples get the fallback."""
    fallback: float = 0.0
    """Score given to a sample whose reward failed (not to one it returned None for: that one gets 0.0)."""
    alias: str | None = None
    """Column name (default: the name, or the function name of an import path); must be unique."""
    in_process: bool = False
    """Run in the calling process, not a worker: for cheap rewards. timeout_s is enforced in any thread
    (`_deadline.py`); a reward that kills the process (os._exit) ends the run."""

    @field_validator("name")
    @classmethod
    def _absolute_file(cls, v: str) -> str:
        """`path/to/file.py:fn` is stored with an absolute path, so a resumed run works from any folder."""
        from pathlib import Path

        file, sep, attr = v.rpartition(":")
        if sep and file.endswith(".py") and Path(file).expanduser().is_file():
            return f"{Path(file).expanduser().resolve()}:{attr}"
        return v

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
    """A reward cannot be trusted to score this run: it failed on every sample for `max_failed_steps`
    consecutive steps (this class), broke the return contract, or tried to end the process (subclasses)."""


class RewardReturnError(RewardFailure):
    """A reward returned something other than one score per completion: a bug in the reward."""


class RewardCrashed(RewardFailure):
    """An in-process reward raised SystemExit (sys.exit) or another non-Exception BaseException."""


@dataclass
class RewardBatch:
    """Scores of one batch. Shapes: N samples, K rewards.

    rewards: [N, K] float32, failed entries hold the reward's fallback, missing entries 0.0.
    names: the K column names; weights: [K] float32; total: [N] float32 = rewards @ weights (TRL's
    nansum of the weighted columns).
    failed: [N, K] bool, True where the fallback was used.
    missing: [N, K] bool, True where the reward returned None (does not apply to that sample).
    metrics: ``reward/<name>/{mean,std,none,failures,failures/<kind>,<reward metric>}``,
    ``reward/total/mean`` (over samples some reward applies to), ``reward/unscorable``.
    """

    rewards: Tensor
    names: tuple[str, ...]
    weights: Tensor
    total: Tensor
    failed: Tensor
    missing: Tensor
    metrics: dict[str, float]

    def apply_to(self, rollouts) -> None:
        """Write rewards, reward_names and reward_weights into a `Rollouts` batch."""
        rollouts.rewards = self.rewards
        rollouts.reward_names = self.names
        rollouts.reward_weights = self.weights


def _is_chat(prompt) -> bool:
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict) and "role" in prompt[0]


class RewardRunner:
    """Runs K rewards over batches in `workers` processes (0 = everything in the calling process).

    rewards: RewardSpec / dicts of its fields / plain callables (weight 1, default timeout; closures and
        callables from ``__main__`` run in the calling process) / (callable, RewardSpec) pairs (a ready
        callable configured by the spec's weight, alias, timeout and fallback; its name is the label).
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
        self.entries = [build_entry(r, workers, RewardSpec) for r in rewards]
        labels = [e.label for e in self.entries]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"reward names must be unique, {dupes} repeat; give each an 'alias'")
        if "total" in labels:
            raise ValueError("'total' is reserved for the weighted sum; give that reward another alias")
        self.names = tuple(labels)
        pre = [e.label for e in self.entries if reward_caps(e.fn).prenormalized]
        mixed = [e.label for e in self.entries if e.label not in pre and e.weight != 0]
        if pre and (mixed or len(pre) > 1):
            log.warning("reward(s) %s are already normalised within their groups (prenormalized) but are summed with %s; "
                        "the weighted sum is no longer a z-score (set the other weights to 0, e.g. task_reward_weight: 0, "
                        "to train on the pre-normalised reward alone with the identity advantage)", pre, mixed or pre[1:])
        self.weights = torch.tensor([e.weight for e in self.entries], dtype=torch.float32)
        self.workers, self.max_failed_steps, self.chunk_size = workers, max_failed_steps, chunk_size
        self._mp_context = mp_context
        self._pool: WorkerPool | None = None
        self.pool_factory = WorkerPool  # (workers, mp_context) -> pool; executor ray: covey.runtime.ray_rewards
        self._finalizer = None
        self._bad_steps = [0] * len(self.entries)
        self._logged: set[tuple[str, str]] = set()
        self._children = Children()  # processes in-process rewards left running: ended by close()

    def _get_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = self.pool_factory(self.workers, self._mp_context)
            self._finalizer = weakref.finalize(self, type(self._pool).close, self._pool)
        return self._pool

    def close(self) -> None:
        """Stop the worker processes and whatever they started (also done at exit and on garbage
        collection), and the processes in-process rewards started and left running."""
        if self._finalizer is not None:
            self._finalizer()
        self._pool = None
        self._children.kill()

    def __enter__(self) -> RewardRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def needs_engine(self) -> bool:
        """Whether a reward asks for the trainer's engine (a judge with the `policy` backend)."""
        return any(reward_caps(e.fn).needs_engine for e in self.entries)

    def set_context(self, *, engine, tokenizer, policy_version: int | None = None) -> None:
        """Hand the live policy's engine, tokenizer and weights version to the rewards that declare
        ``needs_engine`` (through their ``set_context``); the trainer calls it before each scoring.
        Such rewards run in this process (they declare ``in_process``): the engine is never pickled."""
        for e in self.entries:
            if reward_caps(e.fn).needs_engine:
                if not e.in_process:
                    raise RuntimeError(f"reward {e.label!r} needs the trainer's engine but runs in a worker")
                e.fn.set_context(engine=engine, tokenizer=tokenizer, policy_version=policy_version)

    # ------------------------------------------------------------------ scoring
    def __call__(self, prompts: Sequence, completions: Sequence, *, group=None, **columns) -> RewardBatch:
        """Score N completions. `group`: N group ids (list or tensor) or None; columns: lists of length N."""
        start = time.monotonic()
        n = len(completions)
        prompts, completions = list(prompts), list(completions)
        if len(prompts) != n:
            raise ValueError(f"got {len(prompts)} prompts for {n} completions; pass one prompt per completion")
        # TRL's conversational format: a chat prompt's completion is one assistant message
        completions = [[{"role": "assistant", "content": c}] if isinstance(c, str) and _is_chat(p) else c
                       for p, c in zip(prompts, completions)]
        cols = {"prompts": prompts, "completions": completions}
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
        args = [e.arguments(cols) for e in self.entries]  # fails on a missing column before any call
        for e in self.entries:
            if e.group_aware and e.group_key != "group" and e.group_key not in cols:
                raise ValueError(f"reward {e.label!r} scores units of column {e.group_key!r}, which this batch lacks; "
                                 f"the batch has {sorted(cols)}")
        chunks_by_key = {key: self._chunks(n, cols.get(key)) for key in {self._unit_key(e) for e in self.entries}}

        # pieces[k]: (global sample indices, outcome) covering the batch once for reward k
        pieces: list[list[tuple[list[int], Any]]] = [[] for _ in self.entries]
        jobs: list[tuple[int, list[int], list[list[int]]]] = []  # (k, indices, units) for the workers
        for k, e in enumerate(self.entries):
            key = self._unit_key(e)
            for idx in chunks_by_key[key]:
                units = self._units(idx, cols.get(key), e.group_aware)
                if e.in_process:
                    pieces[k].append((idx, self._score_here(e, args[k], idx, units)))
                else:
                    jobs.append((k, idx, units))
        retry = []
        for (k, idx, units), res in zip(jobs, self._run_jobs(jobs, args) if jobs else []):
            if isinstance(res, ChunkOutcome) or len(units) == 1:
                pieces[k].append((idx, res))
            else:  # timed out or killed its worker: re-score unit by unit so only the culprit fails
                retry.extend((k, unit, [unit]) for unit in units)
        budget = RETRY_BUDGET * max((self.entries[k].timeout_s for k, _, _ in retry), default=0.0)
        for (k, unit, _), res in zip(retry, self._run_jobs(retry, args, give_up_s=budget) if retry else []):
            pieces[k].append((unit, res))
        batch = self._assemble(n, pieces)
        audit_verifier(batch, self.entries, self._logged, cols)  # judges vs the task verifier (rewards/judge/audit.py)
        batch.metrics["reward/seconds"] = time.monotonic() - start
        return batch

    def _run_jobs(self, jobs, args, give_up_s: float | None = None) -> list:
        pool_jobs = []
        for k, idx, units in jobs:
            e = self.entries[k]
            pos = {i: j for j, i in enumerate(idx)}
            kwargs = {name: [col[i] for i in idx] for name, col in args[k].items()}
            pool_jobs.append(Job(k, e.payload, (kwargs, len(idx), [[pos[i] for i in u] for u in units]), e.timeout_s))
        return self._get_pool().run(pool_jobs, give_up_s)

    def _score_here(self, e: Entry, args: dict, idx: list[int], units: list[list[int]]) -> ChunkOutcome:
        """Score one chunk in this process; SystemExit & co. become RewardCrashed."""
        pos = {i: j for j, i in enumerate(idx)}
        kwargs = {name: [col[i] for i in idx] for name, col in args.items()}

        try:
            with exit_intercepted(), capped_prints(e.label), self._children.watch():
                return score_chunk(e.fn, kwargs, len(idx), [[pos[i] for i in u] for u in units], timeout_s=e.timeout_s)
        except KeyboardInterrupt as exc:  # Ctrl-C (or a reward raising it) stays an interrupt
            exc.add_note(f"raised while reward {e.label!r} ran in the calling process")
            raise
        except BaseException as exc:  # noqa: BLE001 - score_chunk lets only non-Exception BaseExceptions out
            raise RewardCrashed(
                f"reward {e.label!r} raised {exc!r} while running in the calling process (in_process=True, workers=0, "
                "or a closure / __main__ callable), which would have ended the run; a reward must return scores "
                "(None for a sample it cannot score). Fix it, or run it in a worker where this counts as a failure"
            ) from exc

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
    def _unit_key(e: Entry) -> str:
        """The column a reward's chunks are cut along: its group_key when group-aware, else "group"."""
        return e.group_key if e.group_aware else "group"

    @staticmethod
    def _units(idx: list[int], group: list[int] | None, group_aware: bool) -> list[list[int]]:
        """The pieces of a chunk a retry may score alone: whole groups for group-aware rewards, else samples."""
        if not (group_aware and group is not None):
            return [[i] for i in idx]
        by_group: dict[int, list[int]] = {}
        for i in idx:
            by_group.setdefault(group[i], []).append(i)
        return list(by_group.values())

    def _assemble(self, n: int, pieces) -> RewardBatch:
        K = len(self.entries)
        rewards = torch.zeros(n, K, dtype=torch.float32)
        failed = torch.zeros(n, K, dtype=torch.bool)
        missing = torch.zeros(n, K, dtype=torch.bool)
        metrics: dict[str, float] = {}
        for k, e in enumerate(self.entries):
            counts = dict.fromkeys(FAILURE_KINDS, 0)
            tracebacks: dict[str, str] = {}
            extra: dict[str, list[float]] = {}
            for idx, res in pieces[k]:
                res = self._as_outcome(res, e, len(idx))
                if res.fatal:
                    raise RewardReturnError(
                        f"reward {e.label!r} {res.fatal}; a reward must return one score per completion, in order "
                        "(None for a completion it cannot score), and RewardOutput metrics as lists of numbers"
                    )
                for j, i in enumerate(idx):
                    v, kind = res.values[j], res.kinds[j]
                    if kind is None and v is not None:
                        rewards[i, k] = v
                    elif kind == NOT_APPLICABLE:
                        missing[i, k] = True  # rewards[i, k] stays 0.0: nansum's contribution
                    else:
                        rewards[i, k] = e.fallback
                        failed[i, k] = True
                        counts[kind or "exception"] += 1
                for kind, tb in res.tracebacks.items():
                    tracebacks.setdefault(kind, tb)
                for name, vals in res.metrics.items():
                    extra.setdefault(name, []).extend(vals)
            for kind, tb in tracebacks.items():
                if kind == "metric" and (e.label, kind) not in self._logged:
                    self._logged.add((e.label, kind))
                    log.warning("reward %r: %s", e.label, tb)
                elif counts.get(kind) and (e.label, kind) not in self._logged:
                    self._logged.add((e.label, kind))
                    log.warning("reward %r failed (%s); its sample(s) got fallback %s. First error:\n%s",
                                e.label, kind, e.fallback, tb)
            col = rewards[~missing[:, k], k].double()  # TRL's nanmean / nanstd over the samples the reward applies to;
            metrics[f"reward/{e.label}/mean"] = col.mean().item() if len(col) else math.nan  # float64: a mean of
            metrics[f"reward/{e.label}/std"] = col.std(unbiased=False).item() if len(col) else math.nan  # 3e38s is finite
            metrics[f"reward/{e.label}/none"] = float(missing[:, k].sum())
            none_batch = n > 0 and bool(missing[:, k].all())
            metrics[f"reward/{e.label}/none_batch"] = float(none_batch)
            if none_batch and (e.label, "none_batch") not in self._logged:
                self._logged.add((e.label, "none_batch"))
                log.warning("reward %r returned None (not applicable) for every sample of a batch of %d: its column is "
                            "0.0 on every row; check that the items carry what it needs (counted as reward/%s/none_batch)",
                            e.label, n, e.label)
            metrics[f"reward/{e.label}/failures"] = float(sum(counts.values()))
            for kind, c in counts.items():
                metrics[f"reward/{e.label}/failures/{kind}"] = float(c)
            for name, vals in extra.items():
                if vals:
                    metrics[f"reward/{e.label}/{name}"] = sum(vals) / len(vals)
            self._track(k, e, failed[:, k], missing[:, k], counts, tracebacks)
        # A weighted sum beyond float32 (two rewards of 3e38) would be inf: those rows get every reward's
        # fallback, counted as reward/total/overflow, so advantages never see inf or NaN.
        over = (rewards.double() @ self.weights.double()).abs() > FLOAT32_MAX
        if bool(over.any()):
            rewards[over] = torch.tensor([e.fallback for e in self.entries], dtype=torch.float32)
            failed[over] = True
            if ("total", "overflow") not in self._logged:
                self._logged.add(("total", "overflow"))
                log.warning("the weighted sum of the rewards is beyond float32's range for %d sample(s); they got "
                            "every reward's fallback (counted as reward/total/overflow)", int(over.sum()))
        metrics["reward/total/overflow"] = float(over.sum())
        total = rewards @ self.weights  # [N, K] @ [K] -> [N]; missing entries are 0.0, as in nansum
        unscorable = missing.all(dim=1) if K else torch.zeros(n, dtype=torch.bool)
        scorable = total[~unscorable]
        metrics["reward/total/mean"] = scorable.mean().item() if len(scorable) else (0.0 if n == 0 else math.nan)
        metrics["reward/unscorable"] = float(unscorable.sum())
        if bool(unscorable.any()) and ("*", "unscorable") not in self._logged:
            self._logged.add(("*", "unscorable"))
            log.warning("every reward returned None for %d sample(s) (first: #%d), so they are scored 0.0; make sure "
                        "at least one reward applies to each sample (counted as reward/unscorable)",
                        int(unscorable.sum()), int(unscorable.nonzero()[0, 0]))
        return RewardBatch(rewards, self.names, self.weights.clone(), total, failed, missing, metrics)

    @staticmethod
    def _as_outcome(res, e: Entry, size: int) -> ChunkOutcome:
        if isinstance(res, ChunkOutcome):
            return res
        if res == "timeout":
            msg = (f"reward {e.label!r} did not return within timeout_s={e.timeout_s} on {size} sample(s); its "
                   "worker was killed and replaced")
            return ChunkOutcome([None] * size, ["timeout"] * size, {"timeout": msg})
        if res == "skipped":
            msg = (f"reward {e.label!r} timed out or crashed on a chunk, and re-scoring its samples one by one ran "
                   f"past its budget ({RETRY_BUDGET} x timeout_s={e.timeout_s}) before reaching these {size}")
            return ChunkOutcome([None] * size, ["timeout"] * size, {"timeout": msg})
        return ChunkOutcome([None] * size, ["exception"] * size, {"exception": res[1]})

    def _track(self, k: int, e: Entry, failed_col: Tensor, missing_col: Tensor, counts, tracebacks) -> None:
        """Count consecutive calls where the reward failed on every sample it applies to."""
        applies = ~missing_col
        if not bool(applies.any()):
            return  # nothing to judge: a None everywhere is neither a failure nor a success
        if not bool(failed_col[applies].all()):
            self._bad_steps[k] = 0
            return
        self._bad_steps[k] += 1
        if self._bad_steps[k] >= self.max_failed_steps:
            kinds = ", ".join(f"{c} {kind}" for kind, c in counts.items() if c)
            last = next(iter(tracebacks.values()), "")
            raise RewardFailure(
                f"reward {e.label!r} failed on every sample it applies to for {self._bad_steps[k]} consecutive steps "
                f"({kinds} in the last one); fix it or remove it from the config. Last error:\n{last}"
            )
