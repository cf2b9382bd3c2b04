"""Evaluate a policy on a task: accuracy, unbiased pass@k and maj@k from n samples per problem,
and the mean of each reward column when a run's rewards are given.

`eval_progress` reports how far an evaluation is: a rich progress bar on a terminal, plain lines
(problems done, elapsed, ETA) otherwise, so a log file shows a long evaluation moving too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from covey.engine.base import Engine, SamplingParams
from covey.eval.metrics import majority_vote, pass_at_k
from covey.eval.crossppl import summarize_nll
from covey.eval.samples import append_records, open_samples
from covey.rewards.scoring import Scorer
from covey.samplers import Draw
from covey.rollouts import item_columns
from covey.strategies import completion_texts, sample_groups

__all__ = ["clock", "eval_progress", "evaluate", "summarize"]


def evaluate(
    engine: Engine,
    tokenizer,
    task,
    items: list[dict],
    *,
    n: int = 1,
    ks: tuple[int, ...] = (1,),
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    batch_prompts: int = 64,
    rewards=None,
    progress: Callable[[int], None] | None = None,
    ids: list[int] | None = None,
    samples_out: str | Path | None = None,
    meta: dict | None = None,
    by: str | None = None,
    nll_under=None,
) -> dict:
    """Score `n` completions per item (greedy when temperature == 0) and summarise.

    Correctness comes from the task's verifier (`task.reward`), or, with `rewards` (a
    `covey.rewards.RewardRunner`, e.g. a run's rewards from `covey.train.setup.build_rewards`), from
    its `accuracy` column (the task's verifier there). Returns {"accuracy": mean correctness over all
    samples, "pass@k": unbiased estimator averaged over problems, "maj@k": majority-vote accuracy
    (tasks with `extract_answer` only)} for k <= n; with `rewards` also "reward/<column>" (mean of
    each column) and "reward" (mean weighted total). Without any correctness source (a runner with
    no `accuracy` column) only the reward means are returned. A sample counts as correct for pass@k
    and maj@k when its score is >= 1 (a 0.1 format bonus is not a pass).
    `progress(done)` is called with the number of problems done after each batch of prompts.

    `ids`: each item's problem id (default its position; a shard passes the original indices). A batch
    of prompts is sampled with seed ``seed + ids[start]``, so shards draw distinct samples and a resumed
    run draws the same ones. `samples_out`: per-sample records (`covey.eval.samples`), resumable:
    problems already in the file are not sampled again (their records count in the summary; the
    reward means cover the newly sampled problems only). `meta`: the file's header (the settings a
    resume must match). `by`: an item column; adds ``"by": {value: summary}`` per subset.
    `nll_under`: a `covey.eval.crossppl.nll_scorer`; adds each sample's NLL under that model to its
    record and ``"logprob_under": {nll_per_token, perplexity, tokens}`` over all samples.
    """
    if n < 1 or any(k > n or k < 1 for k in ks):
        raise ValueError(f"need 1 <= k <= n for every k; got n={n}, ks={ks}")
    ids = list(range(len(items))) if ids is None else list(ids)
    if len(ids) != len(items):
        raise ValueError(f"ids has {len(ids)} entries for {len(items)} items")
    if by is not None and any(by not in it for it in items):
        raise ValueError(f"--by {by!r}: not a column of every item (columns: {sorted(items[0]) if items else []})")
    from covey.tasks.base import hooks_of

    hooks = hooks_of(task)
    verified = "accuracy" in rewards.names if rewards is not None else hooks.reward is not None
    if rewards is None and not verified:
        raise ValueError(f"task {getattr(task, 'name', task)!r} has no verifier to score with; pass the run's rewards")
    if samples_out is not None and not verified:
        raise ValueError("--samples-out needs a correctness source (the task's verifier or an accuracy reward)")
    done = open_samples(samples_out, meta or {}, n) if samples_out is not None else {}
    greedy = temperature == 0
    extract = hooks.extract_answer
    scores_of: dict[int, list[float]] = {pid: [float(r["score"]) for r in rs[:n]] for pid, rs in done.items()}
    answers_of: dict[int, list] = {pid: [r["answer"] for r in rs[:n]] for pid, rs in done.items()}
    nll_of: dict[int, list] = {pid: [(r["nll_sum"], r["nll_tokens"]) for r in rs[:n]] for pid, rs in done.items()} if nll_under else {}
    sums: dict[str, float] = {}
    fresh = 0
    for start in range(0, len(items), batch_prompts):
        chunk, chunk_ids = items[start : start + batch_prompts], ids[start : start + batch_prompts]
        if all(pid in done for pid in chunk_ids):
            if progress is not None:
                progress(start + len(chunk))
            continue
        chunk_seed = seed + chunk_ids[0]
        sampling = SamplingParams(temperature=1.0 if greedy else temperature, greedy=greedy, top_p=1.0 if greedy else top_p,
                                  max_new_tokens=max_new_tokens, seed=chunk_seed)  # fmt: skip
        batch = sample_groups(engine, tokenizer, [Draw(it, n) for it in chunk], sampling)
        texts = completion_texts(tokenizer, batch)
        if rewards is not None:  # scored as in training (the same columns reach the reward functions)
            Scorer(rewards, lambda b: texts, [])(batch)
            for k, name in enumerate(batch.reward_names):
                sums[f"reward/{name}"] = sums.get(f"reward/{name}", 0.0) + float(batch.rewards[:, k].sum())
            sums["reward"] = sums.get("reward", 0.0) + float(batch.scalar_rewards().sum())
            fresh += len(chunk)
            scores = batch.reward("accuracy").tolist() if verified else []
        else:
            rows = [it for it in chunk for _ in range(n)]
            scores = task.reward([r["prompt"] for r in rows], texts, **item_columns(rows))
            scores = [float(s) if s is not None else 0.0 for s in scores]
        lengths, finish = batch.lengths.tolist(), batch.finish_reason or ["stop"] * len(texts)
        nll = nll_under([it for it in chunk for _ in range(n)], texts) if nll_under is not None else None
        records = []
        for i, pid in enumerate(chunk_ids):
            if pid in done or not verified:
                continue
            part = slice(i * n, (i + 1) * n)
            scores_of[pid] = scores[part]
            answers_of[pid] = [_text(extract(t)) for t in texts[part]] if extract is not None else [None] * n
            records += [
                {"problem_id": pid, "sample": j, "seed": chunk_seed, "correct": s >= 1.0, "score": s,
                 "answer": a, "length": ln, "finish": f, "completion": t}  # fmt: skip
                for j, (s, a, ln, f, t) in enumerate(zip(scores[part], answers_of[pid], lengths[part], finish[part], texts[part]))
            ]
            if nll is not None:
                nll_of[pid] = nll[part]
                for r, (v, t) in zip(records[-n:], nll[part]):
                    r.update(nll_under=v / t if t else None, nll_sum=v, nll_tokens=t)
        if samples_out is not None:
            append_records(samples_out, records)
        if progress is not None:
            progress(start + len(chunk))
    out: dict = {"problems": len(items), "samples_per_problem": n}
    if done:
        out["resumed_problems"] = sum(1 for pid in ids if pid in done)
    out.update({k: v / max(1, fresh * n) for k, v in sums.items()})
    if not verified or not items:
        return out
    has_answers = extract is not None
    out.update(summarize([scores_of[p] for p in ids], [answers_of[p] for p in ids] if has_answers else None, ks))
    if nll_under is not None:
        out["logprob_under"] = summarize_nll([x for p in ids for x in nll_of[p]])
    if by is not None:
        groups: dict[str, list[int]] = {}
        for it, pid in zip(items, ids):
            groups.setdefault(str(it[by]), []).append(pid)
        out["by"] = {
            v: {"problems": len(pids), **summarize([scores_of[p] for p in pids], [answers_of[p] for p in pids] if has_answers else None, ks)}
            for v, pids in sorted(groups.items())
        }
    return out


def _text(a) -> str | None:
    return None if a is None else str(a)


def summarize(scores: list[list[float]], answers: list[list] | None, ks: tuple[int, ...]) -> dict[str, float]:
    """accuracy (mean score), pass@k (c = samples scored >= 1) and, with answers, maj@k over problems."""
    out = {"accuracy": sum(map(sum, scores)) / sum(map(len, scores))}
    for k in ks:
        out[f"pass@{k}"] = sum(pass_at_k(len(s), sum(1 for x in s if x >= 1.0), k) for s in scores) / len(scores)
        if answers is not None:
            votes = []
            for c, a in zip(scores, answers):
                # the voted answer is right iff some sample with that answer was scored correct
                winner, _ = majority_vote(a[:k])
                votes.append(float(winner is not None and any(ci >= 1.0 for ci, ai in zip(c[:k], a[:k]) if ai == winner)))
            out[f"maj@{k}"] = sum(votes) / len(votes)
    return out


def clock(seconds: float) -> str:
    """A duration for progress lines: ``1:02:03`` (hours) or ``2:03`` (minutes:seconds); ``?`` when unknown.

    >>> clock(3723.4), clock(59.6), clock(float("nan"))
    ('1:02:03', '1:00', '?')
    """
    if not math.isfinite(seconds):
        return "?"
    s = max(0, int(round(seconds)))
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@contextmanager
def eval_progress(total: int, *, console=None, label: str = "eval", live: bool = True) -> Iterator[Callable[[int], None]]:
    """A `progress(done)` callback for `evaluate`: a rich bar when `console` (default: a rich Console
    on stderr) is a terminal and `live`, else one plain line per call on the console's file:
    ``<label>: 64/200 problems | elapsed 0:12 | ETA 0:26``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


    console = console or Console(stderr=True)
    started = time.perf_counter()
    if live and console.is_terminal:
        columns = [TextColumn(f"[bold]{label}"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn()]  # fmt: skip
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda done: bar.update(task, completed=done)
        return

    def line(done: int) -> None:
        elapsed = time.perf_counter() - started
        eta = clock(elapsed / done * (total - done) if done else float("nan"))
        print(f"{label}: {done}/{total} problems | elapsed {clock(elapsed)} | ETA {eta}", file=console.file, flush=True)

    yield line
