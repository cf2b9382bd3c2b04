"""Evaluation metrics over sampled completions: unbiased pass@k and majority-vote maj@k.

Pure functions of correctness flags and extracted answers; sampling, answer extraction and the
evaluation runner live elsewhere (`covey.eval` runner, `covey.rewards.math`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

__all__ = ["maj_at_k", "majority_vote", "mean_pass_at_k", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    r"""Unbiased estimate of pass@k for one problem from `n` samples of which `c` are correct.

    Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (arXiv 2107.03374),
    Eq. 1: ``pass@k = 1 - C(n-c, k) / C(n, k)``, computed in the numerically stable product form
    of their reference code: ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, and 1.0 when ``n - c < k``
    (every k-subset holds a correct sample). Requires ``0 <= c <= n`` and ``1 <= k <= n``.

    >>> round(pass_at_k(5, 2, 2), 12)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    0.7
    >>> round(pass_at_k(10, 3, 1), 12), pass_at_k(16, 0, 4), pass_at_k(16, 16, 4)
    (0.3, 0.0, 1.0)
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (pass@k needs at least k samples), got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(results: Sequence[Sequence[float | bool | None]], k: int, *, threshold: float = 1.0) -> float:
    """Mean over problems of `pass_at_k`; `results[p]` holds the scores of problem p's samples.

    A sample is correct when its score ``>= threshold`` (True counts as 1.0, None as wrong), so
    partial-credit rewards such as a 0.1 format bonus do not count as passes. Every problem needs
    at least k samples; problems may have different numbers of samples.

    >>> round(mean_pass_at_k([[1, 0, 0, 0, 1], [True, False, False, False, False]], k=2), 12)
    0.55
    """
    if not results:
        raise ValueError("results is empty: need at least one problem")
    total = 0.0
    for p, scores in enumerate(results):
        if len(scores) < k:
            raise ValueError(f"problem {p} has {len(scores)} samples, fewer than k={k}")
        c = sum(1 for s in scores if s is not None and float(s) >= threshold)
        total += pass_at_k(len(scores), c, k)
    return total / len(results)


def majority_vote(
    answers: Sequence[Hashable | None], *, equal: Callable[[object, object], bool] | None = None
) -> tuple[object | None, int]:
    """The most frequent non-None answer and its count; ``(None, 0)`` if there is none.

    Answers are grouped into classes: with ``equal=None`` by ``==``, else an answer joins the
    first class whose representative (its first-seen member) it equals, called as
    ``equal(answer, representative)``. Ties go to the class seen first, as with
    ``collections.Counter.most_common`` in TTRL (arXiv 2504.16084).

    >>> majority_vote(["4", "5", "5", "4", None])  # 2 votes each: "4" was seen first
    ('4', 2)
    """
    reps: list[object] = []
    counts: list[int] = []
    for a in answers:
        if a is None:
            continue
        for i, rep in enumerate(reps):
            if (a == rep) if equal is None else equal(a, rep):
                counts[i] += 1
                break
        else:
            reps.append(a)
            counts.append(1)
    if not reps:
        return None, 0
    best = max(range(len(reps)), key=lambda i: (counts[i], -i))  # most votes, then first seen
    return reps[best], counts[best]


def maj_at_k(
    answers: Sequence[object | None],
    gold: object,
    k: int,
    *,
    equal: Callable[[object, object], bool] | None = None,
) -> float:
    """1.0 if the majority vote over the FIRST k extracted answers equals `gold`, else 0.0.

    Majority vote as in `majority_vote` (None answers abstain; ties go to the first-seen
    answer). If all k abstain the score is 0.0. `equal(pred, gold)` also decides the final
    comparison; the default is `covey.rewards.math.math_equal` (so "0.5" and "1/2" share a vote).
    maj@k = cons@k (DeepSeek-R1, arXiv 2501.12948). Uses the first k, not a bootstrap average.

    >>> maj_at_k(["0.5", "1/2", "3", "3"], gold="3", k=3)  # "0.5" and "1/2" make 2 votes
    0.0
    >>> maj_at_k(["0.5", "1/2", "3", "3"], gold="3", k=4)  # 2 - 2 tie: "0.5" seen first
    0.0
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    if len(answers) < k:
        raise ValueError(f"maj@{k} needs at least k={k} answers, got {len(answers)}")
    if equal is None:
        from covey.rewards.math import math_equal as equal
    winner, _ = majority_vote(list(answers[:k]), equal=equal)
    return 1.0 if winner is not None and equal(winner, gold) else 0.0
