"""PNG figures of `covey compare` (matplotlib, Agg): one function per sub-command, each writes `path`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["adastop_png", "coverage_png", "curves_png", "matrix_png", "passk_png"]


def _figure(ncols: int = 1, width: float = 6.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, 4.0), squeeze=False)
    return plt, fig, axes[0]


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curves_png(path: Path, metric: str, curves: dict[str, tuple[np.ndarray, np.ndarray]], table: list[dict]) -> Path:
    """Left: mean +- std over seeds per method on a common step grid. Right: per-seed last-N values
    with the IQM and its bootstrap CI."""
    plt, fig, (ax, bx) = _figure(2)
    for name, (grid, vals) in curves.items():
        mean, std = vals.mean(0), vals.std(0)
        ax.plot(grid, mean, label=f"{name} (n={len(vals)})")
        ax.fill_between(grid, mean - std, mean + std, alpha=0.2)
    ax.set(xlabel="step", ylabel=metric, title=f"{metric}: mean ± std over seeds")
    ax.legend(fontsize=8)
    for i, row in enumerate(table):
        bx.scatter([i] * len(row["per_seed"]), row["per_seed"], s=12, alpha=0.6)
        bx.errorbar([i + 0.15], [row["iqm"]], yerr=[[row["iqm"] - row["ci_low"]], [row["ci_high"] - row["iqm"]]], fmt="o", capsize=4)
    bx.set_xticks(range(len(table)), [r["method"] for r in table], rotation=20, fontsize=8)
    bx.set_xlim(-0.5, len(table) - 0.5)
    bx.set(ylabel=f"last-N mean of {metric}", title="per seed, IQM with 95% bootstrap CI")
    return _save(plt, fig, path)


def passk_png(path: Path, curves: dict[str, np.ndarray], crossings: list) -> Path:
    plt, fig, (ax,) = _figure()
    for name, curve in curves.items():
        ax.plot(np.arange(1, len(curve) + 1), curve, label=name)
    for lo, hi in crossings:
        ax.axvspan(lo, hi, color="grey", alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k", ylabel="pass@k", ylim=(0, 1.02), title="pass@k (shaded: where the curves cross)")
    ax.legend()
    return _save(plt, fig, path)


def coverage_png(path: Path, counts: dict[str, int], k: int) -> Path:
    plt, fig, (ax,) = _figure()
    ax.bar(list(counts), list(counts.values()), color=["tab:grey", "tab:green", "tab:red", "tab:blue"][: len(counts)])
    for i, v in enumerate(counts.values()):
        ax.text(i, v, str(v), ha="center", va="bottom")
    ax.set(ylabel="problems", title=f"coverage at k={k}")
    return _save(plt, fig, path)


def adastop_png(path: Path, interims: list[dict]) -> Path:
    plt, fig, (ax,) = _figure()
    ks = [i["k"] for i in interims]
    bounds = [i["boundary"] if np.isfinite(i["boundary"]) else np.nan for i in interims]
    ax.plot(ks, bounds, "k--", marker="s", label="boundary")
    names = dict.fromkeys(c for i in interims for c in i["T"])
    for c in names:
        pts = [(i["k"], i["T"][c]) for i in interims if c in i["T"]]
        ax.plot(*zip(*pts), marker="o", label=c)
    ax.set(xlabel="interim k", ylabel="statistic (k+1)·|mean diff|", title="AdaStop: statistics vs boundaries")
    ax.set_xticks(ks)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def matrix_png(path: Path, matrix: dict[str, dict[str, float]], metric: str) -> Path:
    rows, cols = list(matrix), list(next(iter(matrix.values())))
    data = np.array([[matrix[r][c] for c in cols] for r in rows])
    plt, fig, (ax,) = _figure(width=max(4.0, 1.4 * len(cols) + 2))
    lim = float(np.abs(data).max()) or 1.0
    im = ax.imshow(data, cmap="RdBu", vmin=-lim, vmax=lim)
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, f"{data[i, j]:+.3f}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(cols)), cols, rotation=20)
    ax.set_yticks(range(len(rows)), rows)
    ax.set(xlabel="eval domain", ylabel="trained on", title=f"Δ {metric} vs base")
    fig.colorbar(im, ax=ax)
    return _save(plt, fig, path)
