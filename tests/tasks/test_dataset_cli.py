"""The README's own-data path from the command line: a JSONL, a reward file, train, eval, export."""

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from covey.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_own_data_example_trains_evaluates_and_exports(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the example's paths are relative to the repository root
    run = tmp_path / "run"
    res = runner.invoke(app, ["train", "examples/own_data/train.yaml", "--run-dir", str(run), "steps=1",
                              "log.progress=false", "reward_workers=1", "rollout.prompts_per_step=2"])  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert "reward/ends_with_answer/mean" in rows[-1] and "reward/brevity/mean" in rows[-1]
    assert (run / "final" / "config.json").is_file()
    data = "examples/own_data/problems.jsonl"
    res = runner.invoke(app, ["eval", "--run", str(run), "--task", "dataset", "--task-param", f"path={data}",
                              "--split", "train", "--limit", "3", "--max-new-tokens", "4"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["problems"] == 3
    res = runner.invoke(app, ["eval", "--run", str(run), "--limit", "3", "--max-new-tokens", "4"])  # the run's task and rewards
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["split"] == "test" and {"reward/ends_with_answer", "reward/brevity"} <= set(out)
    assert "accuracy" not in out  # the run's task has verifier: none
    res = runner.invoke(app, ["eval", "--run", str(run), "--limit", "3", "--max-new-tokens", "4", "--task-param", "verifier=auto"])
    assert res.exit_code == 0 and "accuracy" in json.loads(res.output.strip().splitlines()[-1])
    res = runner.invoke(app, ["eval", "--run", str(run), "--task", "dataset", "--task-param", f"path={data}", "--limit", "3",
                              "--task-param", "eval_path=null"])  # fmt: skip
    assert res.exit_code == 2 and "no 'test' data" in res.output
    assert os.path.isdir(run / "final")


def test_eval_on_own_jsonl_with_a_named_answer_column(tmp_path):
    data = tmp_path / "my.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i} + 1 =", "gold": str(i + 1)}) + "\n" for i in range(3)))
    base = ["eval", "--model", "tiny-llama", "--task", "dataset", "--task-param", f"path={data}",
            "--task-param", "prompt_key=question", "--split", "train", "--max-new-tokens", "4", "--dtype", "fp32"]  # fmt: skip
    res = runner.invoke(app, base + ["--task-param", "answer_key=gold"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["problems"] == 3 and 0.0 <= out["accuracy"] <= 1.0
    res = runner.invoke(app, base)  # no 'answer' column: nothing to score with
    assert res.exit_code == 2 and "has no verifier" in res.output
    res = runner.invoke(app, base[:6] + [f"path={tmp_path / 'nope.jsonl'}"] + base[7:])
    assert res.exit_code == 2 and "nope.jsonl' does not exist" in res.output
