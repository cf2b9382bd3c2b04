"""pass@k curves at large k and coverage sets (the Limits-of-RLVR and MATH-Beyond studies).

`pass_at_k_curve` gives pass@k for every k = 1..N of one problem in O(N) with the ratio recursion of
the Limits study's `math/pass@k.py` (LeapLabTHU/limit-of-RLVR, commit fd2cf37f05cc, as recorded in
covey's design notes; not re-read for this module): ``ratio_k = ratio_{k-1} * (N - c - k + 1) /
(N - k + 1)``, ``pass@k = 1 - ratio_k`` (= 1 - C(N-c, k) / C(N, k), the value of
`covey.eval.metrics.pass_at_k`). Coverage (MATH-Beyond, arXiv 2510.11653, reconstructed from its
dataset card and summaries): the reachable set R_k of a model is the problems where at least one
of k samples is correct; `covey compare coverage --k K` counts the first K samples of each problem
(so R_k is what K samples actually reached, not an estimate).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["coverage", "crossings", "mean_pass_curve", "pass_at_k_curve"]


def pass_at_k_curve(n: int, c: int) -> np.ndarray:
    """[pass@1, ..., pass@n] of one problem with `c` of `n` samples correct.

    >>> [round(float(x), 6) for x in pass_at_k_curve(8, 2)]
    [0.25, 0.464286, 0.642857, 0.785714, 0.892857, 0.964286, 1.0, 1.0]
    """
    if not 0 <= c <= n or n < 1:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    out = np.empty(n)
    ratio = 1.0  # C(n-c, k) / C(n, k), k = 0
    for k in range(1, n + 1):
        ratio *= max(n - c - k + 1, 0) / (n - k + 1)
        out[k - 1] = 1.0 - ratio
    return out


def mean_pass_curve(counts: Iterable[tuple[int, int]]) -> np.ndarray:
    """Mean over problems of `pass_at_k_curve`; `counts` = (N, c) per problem, all with the same N."""
    counts = list(counts)
    if not counts:
        raise ValueError("no problems")
    sizes = {n for n, _ in counts}
    if len(sizes) != 1:
        raise ValueError(f"problems have different sample counts {sorted(sizes)}; pass@k curves need the same N")
    return np.mean([pass_at_k_curve(n, c) for n, c in counts], axis=0)


def crossings(a: np.ndarray, b: np.ndarray, ks: Iterable[int] | None = None) -> list[tuple[int, int]]:
    """Consecutive (k_lo, k_hi) in `ks` (default 1..len) where the sign of a - b flips (exact ties are
    skipped: the sign is carried from the last k where the curves differ)."""
    ks = list(ks) if ks is not None else list(range(1, len(a) + 1))
    out, last = [], None
    for k in ks:
        d = float(a[k - 1] - b[k - 1])
        if abs(d) < 1e-12:
            continue
        if last is not None and (d > 0) != (last[1] > 0):
            out.append((last[0], k))
        last = (k, d)
    return out


def coverage(base: dict[int, int], post: dict[int, int], problems: Iterable[int] | None = None) -> dict:
    """MATH-Beyond sets from correct counts per problem id (a problem is reached when its count of
    correct samples among the first k is > 0):
    expansion = R(post) \\ R(base), shrinkage = R(base) \\ R(post), preservation = both, and
    expansion rate = |expansion| / |D \\ R(base)| over the problems D (default: the ids of both).

    >>> coverage({i: int(i < 4) for i in range(10)}, {i: int(i in (0, 1, 4, 5, 6)) for i in range(10)})["expansion_rate"]
    0.5
    """
    d = sorted(set(base) | set(post)) if problems is None else sorted(problems)
    missing = [p for p in d if p not in base or p not in post]
    if missing:
        raise ValueError(f"problem ids {missing[:5]} are not in both sample sets (evaluate the same problems)")
    rb = {p for p in d if base[p] > 0}
    rp = {p for p in d if post[p] > 0}
    unsolved = len(d) - len(rb)
    return {
        "problems": len(d),
        "expansion": sorted(rp - rb),
        "shrinkage": sorted(rb - rp),
        "preservation": sorted(rb & rp),
        "base_unsolved": unsolved,
        "expansion_rate": len(rp - rb) / unsolved if unsolved else float("nan"),
    }
