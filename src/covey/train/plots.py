"""`covey plot RUN_DIR`: PNG charts of a run's metrics.jsonl (reward/accuracy, length, KL/entropy, time)."""

from __future__ import annotations

from pathlib import Path

from covey.train.metrics import read_metrics

__all__ = ["plot_run"]

# chart file -> (title, metric keys drawn if present)
CHARTS = {
    "reward.png": ("Reward and accuracy", ["reward/mean", "reward/accuracy/mean", "eval/accuracy"]),
    "length.png": ("Completion length", ["length/mean", "length/max", "length/truncated_frac"]),
    "kl_entropy.png": ("KL and entropy", ["kl/mean", "learn/entropy"]),
    "time.png": ("Seconds per step", ["time/generate", "time/reward", "time/learn", "time/step"]),
    "signal.png": ("Learning signal", ["adv/zero_signal_groups", "surrogate/clip_frac", "learn/grad_norm"]),
}


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write the charts into RUN_DIR/plots/; return the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    if not rows:
        raise ValueError(f"{run_dir}/metrics.jsonl has no rows to plot")
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    written = []
    for fname, (title, keys) in CHARTS.items():
        present = [k for k in keys if any(r.get(k) is not None for r in rows)]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for k in present:
            pts = [(r["step"], r[k]) for r in rows if r.get(k) is not None]
            ax.plot(*zip(*pts), marker="o" if len(pts) < 30 else None, ms=3, label=k)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=100)
        plt.close(fig)
        written.append(out_dir / fname)
    return written
