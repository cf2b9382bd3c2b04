"""`covey compare matrix STUDY.yaml` with the training and eval subprocesses replaced by fakes."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from covey.cli import app
from covey.cli import study as study_mod
from covey.cli.study import load_study, run_study

runner = CliRunner()
ACC = {  # (row, task) -> accuracy that the fake eval reports
    ("base", "arithmetic"): 0.5, ("base", "countdown"): 0.25,
    ("arith", "arithmetic"): 0.75, ("arith", "countdown"): 0.125,
    ("mix", "arithmetic"): 0.625, ("mix", "countdown"): 0.5,
}


def write_study(tmp_path, **extra):
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text("model: {name: tiny-llama}\n")
    doc = {"runs_dir": "out", "base": "tiny-llama", "seed": 3,
           "train": {"arith": "grpo.yaml", "mix": {"config": "grpo.yaml", "overrides": ["task.name=mixture"]}},
           "eval": {"tasks": ["arithmetic", "countdown"], "options": {"limit": 4, "max_new_tokens": 8}}, **extra}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class Fakes:
    def __init__(self):
        self.trained, self.evals = [], []

    def train(self, config, seed, run_dir, overrides):
        self.trained.append((config.name, seed, run_dir.name, overrides))
        (run_dir / "final").mkdir(parents=True, exist_ok=True)

    def evaluate(self, args, out):
        self.evals.append(args)
        row = "base" if args[0] == "--model" else args[1].rsplit("/", 1)[-1]
        task = args[args.index("--task") + 1]
        out.write_text("eval: 4/4\n" + json.dumps({"task": task, "accuracy": ACC[(row, task)]}))


def test_study_trains_rows_evaluates_every_cell_and_reuses_results(tmp_path):
    fakes = Fakes()
    plan = load_study(write_study(tmp_path))
    base, rows = run_study(plan, train=fakes.train, evaluate=fakes.evaluate, log=lambda m: None)
    assert fakes.trained == [("grpo.yaml", 3, "arith", []), ("grpo.yaml", 3, "mix", ["task.name=mixture"])]
    assert fakes.evals[0] == ["--model", "tiny-llama", "--task", "arithmetic", "--limit", "4", "--max-new-tokens", "8"]
    assert fakes.evals[2][:2] == ["--run", str(tmp_path / "out" / "arith")] and len(fakes.evals) == 6
    assert [p.name for p in base] == ["base--arithmetic.json", "base--countdown.json"]
    assert [p.name for p in rows["mix"]] == ["mix--arithmetic.json", "mix--countdown.json"]
    again = Fakes()
    run_study(plan, train=again.train, evaluate=again.evaluate, log=lambda m: None)
    assert again.evals == []  # every result file exists: nothing re-evaluated


def test_matrix_cli_from_a_study(tmp_path, monkeypatch):
    fakes = Fakes()
    monkeypatch.setattr("covey.cli.compare.train_seed", fakes.train)
    monkeypatch.setattr(study_mod, "run_eval", fakes.evaluate)
    res = runner.invoke(app, ["compare", "matrix", str(write_study(tmp_path)), "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["delta"] == {"arith": {"arithmetic": 0.25, "countdown": -0.125}, "mix": {"arithmetic": 0.125, "countdown": 0.25}}
    assert (tmp_path / "o" / "matrix.png").exists()


def test_task_params_reach_eval_as_yaml(tmp_path):
    fakes = Fakes()
    path = write_study(tmp_path, eval={"tasks": {"arithmetic": {"task": "arithmetic", "params": {"digits": 2, "ops": "+"}}}})
    run_study(load_study(path), train=fakes.train, evaluate=fakes.evaluate, log=lambda m: None)
    assert fakes.evals[0] == ["--model", "tiny-llama", "--task", "arithmetic", "--task-param", "digits=2", "--task-param", 'ops="+"']


@pytest.mark.parametrize("change, message", [
    ({"train": {"a": "missing.yaml"}}, "does not exist"),
    ({"train": {"base": "grpo.yaml"}}, "must be a plain file name"),
    ({"train": {"..": "grpo.yaml"}}, "'..' must be a plain file name"),  # RUNS_DIR/.. is outside the study
    ({"train": {".": "grpo.yaml"}}, "'.' must be a plain file name"),
    ({"train": {"eval": "grpo.yaml"}}, "'eval' must be a plain file name"),  # RUNS_DIR/eval holds the results
    ({"train": {"a/b": "grpo.yaml"}}, "must be a plain file name"),
    ({"train": {"a--b": "grpo.yaml"}}, "must be a plain file name"),
    ({"eval": {"tasks": {"..": "arithmetic"}}}, "eval column name '..'"),
    ({"train": {"a": {"config": "grpo.yaml", "overrides": ["noequals"]}}}, "key=value"),
    ({"eval": {"tasks": ["arithmetic"], "options": {"bogus": 1}}}, "eval.options"),
    ({"eval": {"tasks": []}}, "eval.tasks"),
    ({"seed": "zero"}, "seed"),
    ({"extra": 1}, "unknown keys"),
])
def test_bad_studies_exit_2_before_anything_runs(tmp_path, change, message):
    path = write_study(tmp_path, **change)
    res = runner.invoke(app, ["compare", "matrix", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_study_and_files_are_exclusive(tmp_path):
    res = runner.invoke(app, ["compare", "matrix", str(write_study(tmp_path)), "--base", "x.json"])
    assert res.exit_code == 2 and "not both" in res.output
    res = runner.invoke(app, ["compare", "matrix"])
    assert res.exit_code == 2 and "STUDY.yaml" in res.output
