"""Aggregates over seeds for `covey compare`: the Open RL Benchmark table (last-N mean per seed, then
mean +- std over seeds), the interquartile mean with a bootstrap CI (rliable), interpolated curves,
and the transfer matrix of data-mixing studies.

Sources: Open RL Benchmark (arXiv 2402.03046; README and `cache.py` of openrlbenchmark/openrlbenchmark,
read for covey's design notes): per seed the mean of the last N logged values, then mean and std over seeds with
numpy's default std (population, ddof=0). rliable (Agarwal et al. 2021, arXiv 2108.13264): IQM =
``scipy.stats.trim_mean(x, 0.25)``, reimplemented here (covey does not depend on scipy) with the same
cut, ``int(0.25 * n)`` values off each end of the sorted sample; the CI is a percentile bootstrap over
seeds (rliable's default interval method; with one task the stratified bootstrap is the plain one),
2000 resamples from a seeded ``numpy.random.default_rng``. Transfer matrix: "Can One Domain Help
Others?" (arXiv 2507.17512), ``delta[train mixture, eval domain] = acc(trained) - acc(base)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["bootstrap_ci", "interpolate_curves", "iqm", "last_n_mean", "mean_std", "transfer_matrix"]


def last_n_mean(values: Sequence[float], n: int) -> float:
    """Mean of the last `n` values (all of them when fewer are logged).

    >>> last_n_mean([1, 2, 3, 4, 5, 6], 3), last_n_mean([0, 1, 1, 1, 3, 5], 3)
    (5.0, 3.0)
    """
    if n < 1:
        raise ValueError(f"last N needs N >= 1, got {n}")
    if len(values) == 0:
        raise ValueError("no values to average")
    return float(np.mean(np.asarray(values, dtype=float)[-n:]))


def mean_std(values: Sequence[float], ddof: int = 0) -> tuple[float, float]:
    """Mean and std over seeds; ``ddof=0`` (population) as numpy's default and ORB's tables."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values")
    return float(x.mean()), float(x.std(ddof=ddof)) if x.size > ddof else float("nan")


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean = ``scipy.stats.trim_mean(x, 0.25)``: drop ``int(0.25 * n)`` values at each
    end of the sorted sample, average the rest.

    >>> iqm([1, 2, 3, 4, 5, 6, 7, 8]), iqm([0, 0, 1, 1, 1, 2, 5, 100])
    (4.5, 1.25)
    """
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        raise ValueError("IQM of no values")
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def bootstrap_ci(values: Sequence[float], stat=iqm, *, reps: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of `stat` over the values (seeds): `reps` resamples with replacement."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap of no values")
    if not 0 < level < 1 or reps < 1:
        raise ValueError(f"need 0 < level < 1 and reps >= 1, got level={level}, reps={reps}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(reps, x.size))
    stats = np.array([stat(x[i]) for i in idx])
    lo, hi = np.percentile(stats, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def interpolate_curves(curves: Sequence[tuple[Sequence[float], Sequence[float]]], points: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Curves (steps, values) of several seeds on one common grid over the steps all of them cover
    (linear interpolation, as ORB's plots); returns (grid, [seeds, points] values)."""
    if not curves:
        raise ValueError("no curves")
    lo = max(float(np.min(s)) for s, _ in curves)
    hi = min(float(np.max(s)) for s, _ in curves)
    if hi < lo:
        raise ValueError("the curves share no step range")
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    return grid, np.stack([np.interp(grid, np.asarray(s, float), np.asarray(v, float)) for s, v in curves])


def transfer_matrix(base: dict[str, float], trained: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``delta[row][domain] = trained[row][domain] - base[domain]`` for every eval domain of the base
    (a row missing a domain is an error: a silent hole would read as "no transfer").

    >>> transfer_matrix({"math": 0.5, "code": 0.25}, {"math-only": {"math": 0.75, "code": 0.125}})
    {'math-only': {'math': 0.25, 'code': -0.125}}
    """
    out: dict[str, dict[str, float]] = {}
    for row, accs in trained.items():
        missing = [d for d in base if d not in accs]
        if missing:
            raise ValueError(f"{row!r} has no result for eval domain(s) {missing} that the base has")
        out[row] = {d: accs[d] - b for d, b in base.items()}
    return out
