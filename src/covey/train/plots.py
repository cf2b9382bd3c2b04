"""`covey plot RUN_DIR`: PNG charts of a run's metrics.jsonl, one panel per kind of quantity.

Each chart file holds panels; a panel holds series of one unit only (rewards, tokens, fractions,
seconds, ...), so a fraction never shares an axis with token counts. Every reward column gets its
own series (``reward/<column>/mean``: the task's verifier `accuracy`, configured rewards, shaping
terms). A series equal to one already in its panel at every step (e.g. the scalar reward of a run
with one reward of weight 1 and its `accuracy` column) is drawn once, labelled with both names.
`chart_panels` computes what is drawn (tested without images); `plot_run` draws it with matplotlib.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from covey.train.metrics import read_metrics

__all__ = ["CHARTS", "UNIT_PANELS", "chart_panels", "plot_run"]

REWARD_COLUMN = re.compile(r"^reward/(?!total/)(.+)/mean$")
"""Per-column reward means (`covey.rewards.runner`, `covey.rewards.scoring`); reward/total/mean is
the reward functions' weighted sum, drawn as `reward/mean` (the scalar with shaping) instead."""

# chart file -> (figure title, [(panel title, metric keys; "reward/<column>/mean" = every reward column)])
CHARTS: dict[str, tuple[str, list[tuple[str, list[str]]]]] = {
    "reward.png": ("Reward", [("training reward (mean per sample)", ["reward/mean", "reward/<column>/mean"]),
                              ("held-out accuracy (greedy)", ["eval/accuracy"])]),
    "length.png": ("Completion length", [("tokens", ["length/mean", "length/max"]),
                                         ("fraction truncated at max_new_tokens", ["length/truncated_frac"])]),
    "kl_entropy.png": ("KL and entropy", [("KL to the reference (per token)", ["kl/mean"]),
                                          ("policy entropy (nats per token)", ["learn/entropy"])]),
    "time.png": ("Time per step", [("seconds", ["time/generate", "time/reward", "time/learn", "time/step"])]),
    "signal.png": ("Learning signal", [("fraction", ["adv/zero_signal_groups", "surrogate/clip_frac"]),
                                       ("gradient norm", ["learn/grad_norm"])]),
}  # fmt: skip
UNIT_PANELS = {"held-out accuracy (greedy)", "fraction truncated at max_new_tokens", "fraction"}
"""Panels of fractions: drawn on a fixed 0..1 axis, so a small wobble does not look like a big change."""

Series = tuple[str, list[int], list[float]]


def _keys(pattern: list[str], rows: list[dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    for k in pattern:
        if k == "reward/<column>/mean":
            present = dict.fromkeys(key for r in rows for key in r if REWARD_COLUMN.match(key))
            keys += [key for key in present if key not in keys]
        elif k not in keys:
            keys.append(k)
    return keys


def _same(a: Series, b: Series) -> bool:
    return a[1] == b[1] and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a[2], b[2]))


def chart_panels(rows: list[dict[str, Any]]) -> dict[str, tuple[str, list[tuple[str, list[Series]]]]]:
    """{chart file: (figure title, [(panel title, [(label, steps, values)])])} for the metrics rows:
    panels without data are left out, charts without panels too; a series equal to an earlier one
    of its panel is merged into it (labels joined by " = ")."""
    out = {}
    for fname, (title, panels) in CHARTS.items():
        drawn = []
        for panel, pattern in panels:
            series: list[Series] = []
            for k in _keys(pattern, rows):
                pts = [(r["step"], float(r[k])) for r in rows if isinstance(r.get(k), (int, float))]
                if not pts:
                    continue
                new: Series = (k, [p[0] for p in pts], [p[1] for p in pts])
                twin = next((i for i, s in enumerate(series) if _same(s, new)), None)
                if twin is None:
                    series.append(new)
                else:
                    label, xs, ys = series[twin]
                    series[twin] = (f"{label} = {k}", xs, ys)
            if series:
                drawn.append((panel, series))
        if drawn:
            out[fname] = (title, drawn)
    return out


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write the charts into RUN_DIR/plots/; return the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    if not rows:
        raise ValueError(f"{run_dir}/metrics.jsonl has no rows to plot")
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    written = []
    for fname, (title, panels) in chart_panels(rows).items():
        fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.6 * len(panels) + 0.6), sharex=True, squeeze=False)
        for ax, (panel, series) in zip(axes[:, 0], panels):
            for label, xs, ys in series:
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=label)
            ax.set_title(panel, fontsize=10)
            if panel in UNIT_PANELS:
                ax.set_ylim(-0.05, 1.05)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[-1, 0].set_xlabel("step")
        axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=100)
        plt.close(fig)
        written.append(out_dir / fname)
    return written
