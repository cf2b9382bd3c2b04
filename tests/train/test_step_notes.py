"""What a run says beyond its numbers (covey.train.notices, covey.train.threads): dynamic sampling's
outcome in the step line and counted, a step far slower than before with its likely cause, the thread
count chosen from the free cores, and a resumed run's accuracy change."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from covey.train import threads as th
from covey.train.notices import StepNotes, filter_text, scoring_text
from covey.train.run import _info


def test_the_step_line_says_when_dynamic_sampling_fell_back_and_the_run_counts_it():
    fell = {"reward/mean": 0.0, "filter/gen_batches": 10, "filter/fallback_unfiltered": 1.0, "filter/underfilled": 1.0,
            "filter/kept_groups": 0, "time/reward": 157.0, "time/step": 181.0}  # the step: 157 s of 181 s scoring
    line = _info(fell)
    assert "filter: no group with signal in 10 rounds, trained unfiltered" in line and "scoring 157s" in line
    notes = StepNotes()
    said = notes.observe(1, fell)
    assert len(said) == 1 and said[0].startswith("note: dynamic sampling found no group whose rewards differ in 10")
    assert notes.observe(2, fell) == []  # said once
    notes.observe(3, {**fell, "filter/fallback_unfiltered": 0.0, "filter/kept_groups": 3})
    notes.observe(4, {"reward/mean": 1.0, "time/step": 1.0})  # a step that did not filter
    assert notes.summary() == {"filter_steps": 3, "filter_fallback_steps": 2, "filter_underfilled_steps": 3}
    assert notes.closing_lines() == ["dynamic sampling: trained unfiltered on 2 and underfilled on 3 of the 3 steps this "
                                     "process filtered"]  # fmt: skip
    assert filter_text({"reward/mean": 1.0}) is None and scoring_text({"time/reward": 1.0, "time/step": 10.0}) is None


def test_a_far_slower_step_is_explained_once():
    notes = StepNotes()
    for step in (1, 2, 3):
        assert notes.observe(step, {"time/step": 9.0, "length/mean": 10.0}) == []
    busy = th.CpuView(2, 11.0, 13.0)
    (line,) = notes.observe(4, {"time/step": 120.0, "length/mean": 10.0}, cpu=lambda: busy, threads="threads: auto (now 1)")
    assert line.startswith("note: step 4 took 120 s, 13x the median of the steps before it (9.0 s): the CPU is busy with other work")
    assert "11.0 other runnable tasks on 2 usable cores" in line and "threads: auto (now 1)" in line
    assert notes.observe(5, {"time/step": 500.0, "length/mean": 10.0}, cpu=busy) == []  # once per run
    quiet = StepNotes()
    for step, t in ((1, 2.0), (2, 2.0)):
        quiet.observe(step, {"time/step": t, "length/mean": 4.0})
    (line,) = quiet.observe(3, {"time/step": 30.0, "time/reward": 25.0, "length/mean": 20.0}, cpu=th.CpuView(2, 0.0, 0.1))
    assert "scoring took 25 s of it" in line and "completions were 5.0x longer" in line and "CPU is busy" not in line
    assert StepNotes().observe(1, {"time/step": 100.0}) == []  # nothing to compare with yet


def test_auto_threads_follow_the_free_cores_and_the_cgroup_quota(monkeypatch, tmp_path):
    assert th.auto_threads(th.CpuView(2, 0.0, 0.4)) == 2
    assert th.auto_threads(th.CpuView(2, 2.0, 2.5)) == 1  # two competing processes: one thread
    assert th.auto_threads(th.CpuView(2, 4.0, 6.0)) == 1
    assert th.auto_threads(th.CpuView(16, 4.2, 5.0)) == 12
    monkeypatch.setattr(th, "_cgroup_quota", lambda: 1.5)
    monkeypatch.setattr(th.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert th.usable_cores() == 1.5
    monkeypatch.setattr(th, "_cgroup_quota", lambda: None)
    assert th.usable_cores() == 4.0


def test_the_view_counts_other_runnable_tasks_not_this_process(monkeypatch):
    running = iter([5, 5, 6, 4])
    monkeypatch.setattr(th, "_procs_running", lambda: next(running))
    monkeypatch.setattr(th, "_own_running", lambda: 1)  # the thread that reads
    monkeypatch.setattr(th, "usable_cores", lambda: 2.0)
    monkeypatch.setattr(th.os, "cpu_count", lambda: 2)
    view = th.cpu_view(samples=4, interval_s=0.0)
    assert view.others == 4.0 and view.usable == 2.0  # (4 + 4 + 5 + 3) / 4
    monkeypatch.setattr(th, "_procs_running", lambda: None)  # no /proc (not Linux): torch's default
    assert th.cpu_view(samples=1) is None and th.auto_threads(None) is None


def test_threads_auto_is_capped_by_torchs_default_and_rechecked(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(th, "_DEFAULT", [2])
    views = iter([th.CpuView(2, 0.0, 0.0), th.CpuView(2, 3.0, 4.0), th.CpuView(2, 3.0, 4.0)])
    monkeypatch.setattr(th, "cpu_view", lambda: next(views))
    try:
        torch.set_num_threads(1)
        policy = th.Threads("auto")
        assert policy.apply() == "threads 1 -> 2" + ": 0.0 other runnable tasks on 2 usable cores (load average 0.0)"
        assert policy.apply().startswith("threads 2 -> 1: 3.0 other runnable tasks")
        assert policy.apply() is None and torch.get_num_threads() == 1  # unchanged: nothing said
        assert th.Threads(0).apply() is None  # torch's default: left alone
    finally:
        torch.set_num_threads(before)


def test_a_resumed_run_reports_the_change_from_its_first_accuracy(tmp_path):
    from covey.train.config import load_config
    from covey.train.run import train

    cfg = ["model.name=tiny-llama", "task.params.n_train=16", "task.params.n_test=4", "rollout.prompts_per_step=2",
           "rollout.group_size=2", "sampling.max_new_tokens=2", "reward_workers=0", "log.report_to=[jsonl]", "eval.size=4",
           "log.progress=false", "threads=1"]  # fmt: skip
    train(load_config(None, cfg + ["steps=1"]), tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first = next(r["eval/accuracy"] for r in rows if r["step"] == 0)
    out = train(load_config(None, cfg + ["steps=2"]), tmp_path / "run", resume=True)
    assert out["eval_before"] == first  # carried over, not measured again and not nan


def test_covey_help_imports_neither_torch_nor_transformers():
    """`covey --help` and `covey config show` answer without the model stack (the issue: 30 s and 37 s)."""
    code = ("import sys; from typer.testing import CliRunner; from covey.cli import app; r = CliRunner(); "
            "assert r.invoke(app, ['--help']).exit_code == 0; "
            "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules)); "
            "res = r.invoke(app, ['config', 'show', 'examples/quickstart.yaml']); assert res.exit_code == 0, res.output; "
            "print('transformers' in sys.modules)")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    help_mods, config_transformers = out.stdout.split("\n")[:2]
    assert help_mods == "['numpy']" and config_transformers == "False"


@pytest.mark.parametrize("var", ["OMP_WAIT_POLICY"])
def test_importing_covey_sets_a_passive_openmp_wait_unless_set(var):
    code = f"import os, covey; print(os.environ.get({var!r}))"
    env = {k: v for k, v in os.environ.items() if k != var}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root / "src")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "PASSIVE"
    env[var] = "ACTIVE"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "ACTIVE"


def test_the_doctests_of_the_console_and_trl_name_modules_hold():
    import doctest

    from covey.train import notices, threads, trl_names

    for mod in (notices, threads, trl_names):
        result = doctest.testmod(mod)
        assert result.attempted > 0 and result.failed == 0, mod.__name__


def test_end_of_run_paths_are_whole_lines_on_a_narrow_terminal(monkeypatch):
    """`plots: ⏎ runs/...` was what a 80-column terminal showed: each path is now its own unwrapped line."""
    import io

    from rich.console import Console

    from covey.train import run

    out = io.StringIO()
    monkeypatch.setattr(run, "console", Console(file=out, width=30, force_terminal=False))
    path = "runs/a-rather-long-run-name-20261127-210000/plots"
    run._say(f"plots: {path}")
    run.console.print(f"plots: {path}")  # what rich does without soft_wrap: breaks the line inside the path
    said, unwrapped = out.getvalue().split("\n", 1)
    assert said == f"plots: {path}"
    assert unwrapped.count("\n") > 1  # so the check above can fail
