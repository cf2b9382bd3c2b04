"""Evaluate a policy on a task: accuracy, unbiased pass@k and maj@k from n samples per problem,
and the mean of each reward column when a run's rewards are given.

`eval_progress` reports how far an evaluation is: a rich progress bar on a terminal, plain lines
(problems done, elapsed, ETA) otherwise, so a log file shows a long evaluation moving too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from covey.engine.base import Engine, SamplingParams
from covey.eval.metrics import majority_vote, pass_at_k
from covey.rewards.scoring import Scorer
from covey.samplers import Draw
from covey.strategies import completion_texts, item_columns, sample_groups

__all__ = ["eval_progress", "evaluate"]


def evaluate(
    engine: Engine,
    tokenizer,
    task,
    items: list[dict],
    *,
    n: int = 1,
    ks: tuple[int, ...] = (1,),
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    batch_prompts: int = 64,
    rewards=None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Score `n` completions per item (greedy when temperature == 0) and summarise.

    Correctness comes from the task's verifier (`task.reward`), or, with `rewards` (a
    `covey.rewards.RewardRunner`, e.g. a run's rewards from `covey.train.setup.build_rewards`), from
    its `accuracy` column (the task's verifier there). Returns {"accuracy": mean correctness over all
    samples, "pass@k": unbiased estimator averaged over problems, "maj@k": majority-vote accuracy
    (tasks with `extract_answer` only)} for k <= n; with `rewards` also "reward/<column>" (mean of
    each column) and "reward" (mean weighted total). Without any correctness source (a runner with
    no `accuracy` column) only the reward means are returned.
    `progress(done)` is called with the number of problems done after each batch of prompts.
    """
    if n < 1 or any(k > n or k < 1 for k in ks):
        raise ValueError(f"need 1 <= k <= n for every k; got n={n}, ks={ks}")
    verified = "accuracy" in rewards.names if rewards is not None else getattr(task, "reward", None) is not None
    if rewards is None and not verified:
        raise ValueError(f"task {getattr(task, 'name', task)!r} has no verifier to score with; pass the run's rewards")
    greedy = temperature == 0
    correct: list[list[float]] = []
    answers: list[list] = []
    sums: dict[str, float] = {}
    for start in range(0, len(items), batch_prompts):
        chunk = items[start : start + batch_prompts]
        sampling = SamplingParams(
            temperature=1.0 if greedy else temperature, greedy=greedy, max_new_tokens=max_new_tokens, seed=seed + start
        )
        batch = sample_groups(engine, tokenizer, [Draw(it, n) for it in chunk], sampling)
        texts = completion_texts(tokenizer, batch)
        if rewards is not None:  # scored as in training (the same columns reach the reward functions)
            Scorer(rewards, lambda b: texts, [])(batch)
            for k, name in enumerate(batch.reward_names):
                sums[f"reward/{name}"] = sums.get(f"reward/{name}", 0.0) + float(batch.rewards[:, k].sum())
            sums["reward"] = sums.get("reward", 0.0) + float(batch.scalar_rewards().sum())
            scores = batch.reward("accuracy").tolist() if verified else []
        else:
            rows = [it for it in chunk for _ in range(n)]
            scores = task.reward([r["prompt"] for r in rows], texts, **item_columns(rows))
            scores = [float(s) if s is not None else 0.0 for s in scores]
        extract = getattr(task, "extract_answer", None)
        for i in range(len(chunk)):
            if verified:
                correct.append(scores[i * n : (i + 1) * n])
            if verified and extract is not None:
                answers.append([extract(t) for t in texts[i * n : (i + 1) * n]])
        if progress is not None:
            progress(start + len(chunk))
    out: dict[str, float] = {"problems": len(items), "samples_per_problem": n}
    out.update({k: v / max(1, len(items) * n) for k, v in sums.items()})
    if not verified or not correct:
        return out
    out["accuracy"] = sum(map(sum, correct)) / sum(map(len, correct))
    for k in ks:
        out[f"pass@{k}"] = sum(pass_at_k(n, int(sum(c)), k) for c in correct) / len(correct)
        if answers:
            votes = []
            for c, a in zip(correct, answers):
                # the voted answer is right iff some sample with that answer was scored correct
                winner, _ = majority_vote(a[:k])
                votes.append(float(winner is not None and any(ci > 0 for ci, ai in zip(c[:k], a[:k]) if ai == winner)))
            out[f"maj@{k}"] = sum(votes) / len(votes)
    return out


@contextmanager
def eval_progress(total: int, *, console=None, label: str = "eval", live: bool = True) -> Iterator[Callable[[int], None]]:
    """A `progress(done)` callback for `evaluate`: a rich bar when `console` (default: a rich Console
    on stderr) is a terminal and `live`, else one plain line per call on the console's file:
    ``<label>: 64/200 problems | elapsed 0:12 | ETA 0:26``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from covey.train.metrics import clock

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
