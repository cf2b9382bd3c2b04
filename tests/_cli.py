"""`covey train` on an example config, in this process (typer's runner: the CLI's parsing, checks and run,
without a new interpreter's start-up), for the 2-step example runs of the agent methods."""

import json
from pathlib import Path

from typer.testing import CliRunner

from covey.cli import app

EXAMPLES = Path(__file__).parents[1] / "examples"


def train_example(example: str, run_dir: Path, *overrides: str) -> list[dict]:
    """Run `covey train EXAMPLES/<example> --run-dir RUN_DIR OVERRIDES...` (2 steps, quiet, jsonl only);
    returns the rows of metrics.jsonl, after checking the command succeeded."""
    args = ["train", str(EXAMPLES / example), *overrides, "steps=2", "reward_workers=0", "log.report_to=[jsonl]",
            "log.progress=false", "--run-dir", str(run_dir)]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, (out.output[-2000:], out.exception)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    return rows
