"""Evaluate a policy on a task: accuracy, unbiased pass@k and maj@k from n samples per problem."""

from __future__ import annotations

from covey.engine.base import Engine, SamplingParams
from covey.eval.metrics import majority_vote, pass_at_k
from covey.samplers import Draw
from covey.strategies import completion_texts, item_columns, sample_groups

__all__ = ["evaluate"]


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
) -> dict[str, float]:
    """Score `n` completions per item (greedy when temperature == 0) and summarise.

    Returns {"accuracy": mean correctness over all samples, "pass@k": unbiased estimator averaged over
    problems, "maj@k": majority-vote accuracy (tasks with `extract_answer` only)} for k <= n.
    """
    if n < 1 or any(k > n or k < 1 for k in ks):
        raise ValueError(f"need 1 <= k <= n for every k; got n={n}, ks={ks}")
    greedy = temperature == 0
    correct: list[list[float]] = []
    answers: list[list] = []
    for start in range(0, len(items), batch_prompts):
        chunk = items[start : start + batch_prompts]
        sampling = SamplingParams(
            temperature=1.0 if greedy else temperature, greedy=greedy, max_new_tokens=max_new_tokens, seed=seed + start
        )
        batch = sample_groups(engine, tokenizer, [Draw(it, n) for it in chunk], sampling)
        texts = completion_texts(tokenizer, batch)
        rows = [it for it in chunk for _ in range(n)]
        cols = item_columns(rows)
        scores = task.reward([r["prompt"] for r in rows], texts, **cols)
        scores = [float(s) if s is not None else 0.0 for s in scores]
        extract = getattr(task, "extract_answer", None)
        for i in range(len(chunk)):
            correct.append(scores[i * n : (i + 1) * n])
            if extract is not None:
                answers.append([extract(t) for t in texts[i * n : (i + 1) * n]])
    accuracy = sum(map(sum, correct)) / sum(map(len, correct))
    out = {"accuracy": accuracy, "problems": len(correct), "samples_per_problem": n}
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
