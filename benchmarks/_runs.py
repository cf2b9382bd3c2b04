"""Per-seed run files shared by the learning-run benchmarks (samplers_experiment.py, rollout_curves.py,
agents_experiment.py): OUT/seed<k>/<name>.jsonl, one JSON row per logged step; the summary and table."""

from __future__ import annotations

import json
from pathlib import Path


def write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def load_seeds(out: Path, name: str) -> list[list[dict]]:
    """The rows of every seed that has a finished run of `name`."""
    return [[json.loads(x) for x in p.read_text().splitlines()] for p in sorted(out.glob(f"seed*/{name}.jsonl"))]


def seed_mean(per: list[dict]) -> dict:
    """The mean over seeds of every figure of the per-seed summaries."""
    return {k: sum(p[k] for p in per) / len(per) for k in per[0]}


def write_summary(out: Path, summary: dict, lines: list[str]) -> str:
    """OUT/summary.json and OUT/table.md (the markdown `lines`); returns the table."""
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    return table
