"""`covey compare matrix STUDY.yaml`: train every config of a data-mixing study, evaluate the base model
and every trained model on every eval task, and hand the result files to the transfer matrix.

STUDY.yaml::

    runs_dir: study/             # run folders RUNS_DIR/<name>, eval results RUNS_DIR/eval/<row>--<column>.json
    base: tiny-llama             # the base model (alias or folder): the matrix's reference row
    seed: 0                      # seed of every training run (default 0)
    train:                       # row name -> a config, or {config: PATH, overrides: [key=value, ...]}
      arith: examples/tiny/grpo.yaml
      count: {config: examples/tiny/grpo.yaml, overrides: [task.name=countdown]}
    eval:                        # the columns: task names, or name -> {task: NAME, params: {...}}
      tasks: [arithmetic, countdown]
      options: {limit: 100, max_new_tokens: 8}   # covey eval options shared by every cell

Everything already done is reused: a finished run (with ``final/``) is not retrained, a killed one is
resumed from its checkpoint (`covey.cli.compare.train_seed`), and an eval result file that exists is
not recomputed (each is written whole after its `covey eval` succeeds). The study file is checked before
anything runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

__all__ = ["EVAL_OPTIONS", "load_study", "run_eval", "run_study"]

# covey eval options a study may set for every cell, and the flag each becomes
EVAL_OPTIONS = {"limit": "--limit", "n": "--n", "k": "--k", "temperature": "--temperature", "top_p": "--top-p",
                "max_new_tokens": "--max-new-tokens", "split": "--split", "dtype": "--dtype", "device": "--device",
                "seed": "--seed", "batch_prompts": "--batch-prompts"}


def load_study(path: Path) -> dict:
    """The study, validated and normalised: {runs_dir, base, seed, train: {name: (config, overrides)},
    columns: {name: (task, params)}, options: [flags]}. Raises ValueError on anything malformed."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"study file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a study is a mapping with runs_dir, base, train and eval")
    unknown = sorted(set(raw) - {"runs_dir", "base", "seed", "train", "eval"})
    missing = [k for k in ("runs_dir", "base", "train", "eval") if k not in raw]
    if unknown or missing:
        raise ValueError(f"{path}: " + "; ".join(([f"unknown keys {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])))
    if not isinstance(raw["base"], str) or not raw["base"]:
        raise ValueError(f"{path}: base must be a model name or folder, got {raw['base']!r}")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{path}: seed must be an int, got {seed!r}")
    root = Path(path).parent
    train = {}
    if not isinstance(raw["train"], dict) or not raw["train"]:
        raise ValueError(f"{path}: train must map row names to configs")
    for name, spec in raw["train"].items():
        name = _plain_name(path, "train row", name)
        spec = {"config": spec} if isinstance(spec, str) else spec
        if not isinstance(spec, dict) or set(spec) - {"config", "overrides"} or not isinstance(spec.get("config"), str):
            raise ValueError(f"{path}: train.{name} must be a config path or {{config: PATH, overrides: [key=value]}}, got {spec!r}")
        overrides = spec.get("overrides", [])
        if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise ValueError(f"{path}: train.{name}.overrides must be a list of key=value strings, got {overrides!r}")
        config = Path(spec["config"]) if Path(spec["config"]).is_absolute() or Path(spec["config"]).exists() else root / spec["config"]
        if not config.is_file():
            raise ValueError(f"{path}: train.{name}: config {spec['config']} does not exist")
        train[name] = (config, list(overrides))
    ev = raw["eval"]
    if not isinstance(ev, dict) or set(ev) - {"tasks", "options"} or "tasks" not in ev:
        raise ValueError(f"{path}: eval must be {{tasks: [...], options: {{...}}}}, got {ev!r}")
    tasks = ev["tasks"]
    tasks = {str(t): {"task": t} for t in tasks} if isinstance(tasks, list) else tasks
    if not isinstance(tasks, dict) or not tasks:
        raise ValueError(f"{path}: eval.tasks must list task names or map column names to {{task, params}}")
    columns = {}
    for col, spec in tasks.items():
        spec = {"task": spec} if isinstance(spec, str) else spec
        col = _plain_name(path, "eval column", col)
        if (not isinstance(spec, dict) or set(spec) - {"task", "params"} or not isinstance(spec.get("task"), str)
                or not isinstance(spec.get("params", {}), dict)):
            raise ValueError(f"{path}: eval.tasks.{col} must be a task name or {{task: NAME, params: {{...}}}}, got {spec!r}")
        columns[col] = (spec["task"], dict(spec.get("params", {})))
    options = ev.get("options", {}) or {}
    if not isinstance(options, dict) or set(options) - set(EVAL_OPTIONS):
        raise ValueError(f"{path}: eval.options takes {', '.join(EVAL_OPTIONS)}, got {options!r}")
    flags = [x for k, v in options.items() for x in (EVAL_OPTIONS[k], str(v))]
    runs_dir = Path(raw["runs_dir"]) if Path(raw["runs_dir"]).is_absolute() else root / raw["runs_dir"]
    return {"runs_dir": runs_dir, "base": raw["base"], "seed": seed, "train": train, "columns": columns, "options": flags}


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_RESERVED = {"base", "eval"}  # the matrix's reference row; RUNS_DIR/eval holds the results


def _plain_name(path, what: str, name) -> str:
    """A row or column name is a folder / file name part: plain characters, not `.` / `..`, no '--', not reserved."""
    name = str(name)
    if not _PLAIN.fullmatch(name) or "--" in name or name.lower() in _RESERVED:
        raise ValueError(f"{path}: {what} name {name!r} must be a plain file name (letters, digits, . _ + -, not starting "
                         f"with a dot, no '--') and not one of {sorted(_RESERVED)}: rows are folders RUNS_DIR/<row> and "
                         "cells RUNS_DIR/eval/<row>--<column>.json")  # fmt: skip
    return name


def run_eval(args: list[str], out: Path) -> None:
    """`covey eval ARGS` in a subprocess; its stdout goes to `out` (written whole, only on success)."""
    cmd = [sys.executable, "-m", "covey.cli", "eval", *args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise ValueError(f"covey eval {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(done.stdout)
    os.replace(tmp, out)


def run_study(study: dict, *, train=None, evaluate=None, log=print) -> tuple[list[Path], dict[str, list[Path]]]:
    """Train the rows, evaluate base and rows on every column; returns (base files, {row: files}).
    `train(config, seed, run_dir, overrides)` and `evaluate(args, out)` default to the subprocess ones."""
    from covey.cli.compare import train_seed

    train, evaluate = train or train_seed, evaluate or run_eval
    runs, evals = study["runs_dir"], study["runs_dir"] / "eval"
    evals.mkdir(parents=True, exist_ok=True)
    for name, (config, overrides) in study["train"].items():
        log(f"matrix: train {name} ({config})")
        train(config, study["seed"], runs / name, overrides)

    def cells(row: str, model_args: list[str]) -> list[Path]:
        files = []
        for col, (task, params) in study["columns"].items():
            out = evals / f"{row}--{col}.json"
            if not out.exists():
                args = [*model_args, "--task", task, *[x for k, v in params.items() for x in ("--task-param", f"{k}={json.dumps(v)}")], *study["options"]]
                log(f"matrix: eval {row} on {col}")
                evaluate(args, out)
            files.append(out)
        return files

    base = cells("base", ["--model", study["base"]])
    rows = {name: cells(name, ["--run", str(runs / name)]) for name in study["train"]}
    return base, rows
