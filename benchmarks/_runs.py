"""Per-seed run files shared by the learning-run benchmarks (samplers_experiment.py, rollout_curves.py):
OUT/seed<k>/<name>.jsonl, one JSON row per logged step."""

from __future__ import annotations

import json
from pathlib import Path


def write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def load_seeds(out: Path, name: str) -> list[list[dict]]:
    """The rows of every seed that has a finished run of `name`."""
    return [[json.loads(x) for x in p.read_text().splitlines()] for p in sorted(out.glob(f"seed*/{name}.jsonl"))]
