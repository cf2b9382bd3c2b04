"""No lost or corrupted runs: SIGTERM saves, one process per folder, atomic re-saves and metric
rewrites, safe resume overrides only, a full disk named in one line."""

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from covey.train import checkpoint as ckpt_mod
from covey.train.checkpoint import WriteError, latest_checkpoint, load_checkpoint, save_checkpoint
from covey.train.config import ConfigError, load_config, resume_config
from covey.train.metrics import MetricsLogger, read_metrics
from covey.train.runlock import RunLock, RunLocked

COVEY = [sys.executable, "-m", "covey.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CFG = {"model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 32, "n_test": 4}},
       "rollout": {"prompts_per_step": 2, "group_size": 2}, "sampling": {"max_new_tokens": 4}, "reward_workers": 0,
       "algo": {"preset": "grpo", "kl": None}, "log": {"progress": False, "tensorboard": False}, "steps": 500}  # fmt: skip


def _yaml(tmp_path, **over):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**CFG, **over}))
    return path


def _wait_for(path, proc, timeout=120):
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None and time.time() < deadline, f"no {path} before the process ended"
        time.sleep(0.05)


def test_sigterm_saves_a_checkpoint_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(COVEY + ["train", str(_yaml(tmp_path)), "--run-dir", str(run)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    _wait_for(run / "metrics.jsonl", proc)
    deadline = time.time() + 60
    while not read_metrics(run / "metrics.jsonl") and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-2000:]
    assert "SIGTERM" in out and "resume with" in out
    step = latest_checkpoint(run)
    assert step is not None and int(step.name.split("-")[1]) >= 1
    res = subprocess.run(COVEY + ["train", "--resume", str(run), "steps=" + str(int(step.name.split("-")[1]) + 1)],
                         env=ENV, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert read_metrics(run / "metrics.jsonl")[-1]["step"] == int(step.name.split("-")[1]) + 1


def test_a_second_process_on_the_same_run_folder_is_refused(tmp_path):
    lock = RunLock(tmp_path).acquire()
    try:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(CFG))
        res = subprocess.run(COVEY + ["train", "--resume", str(tmp_path)], env=ENV, capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and f"in use by another covey process (pid {os.getpid()})" in res.stderr, res.stderr
        with pytest.raises(RunLocked):
            RunLock(tmp_path).acquire()
    finally:
        lock.release()
    RunLock(tmp_path).acquire().release()  # free again


def test_a_killed_owner_leaves_no_stale_lock(tmp_path):
    code = f"from covey.train.runlock import RunLock; RunLock({str(tmp_path)!r}).acquire(); import os; os.kill(os.getpid(), 9)"
    subprocess.run([sys.executable, "-c", code], env=ENV)
    assert (tmp_path / ".lock").exists()
    RunLock(tmp_path).acquire().release()


def test_kill_during_a_resave_of_the_same_step_keeps_a_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 3, {"w": torch.ones(2)}, {"tag": "first"}, keep=1)

    def killed(src, dst):  # the process dies right after moving the old copy aside
        real_rename(src, dst)
        if ".aside-" in str(dst):
            raise KeyboardInterrupt("killed")

    real_rename = os.rename
    monkeypatch.setattr(ckpt_mod.os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 3, {"w": torch.zeros(2)}, {"tag": "second"}, keep=1)
    monkeypatch.setattr(ckpt_mod.os, "rename", real_rename)
    found = latest_checkpoint(tmp_path)
    assert found is not None and found.name == "step-000003"
    payload, meta = load_checkpoint(found)
    assert meta["tag"] == "first" and torch.equal(payload["w"], torch.ones(2))


def test_metrics_rewrite_on_resume_is_atomic(tmp_path, monkeypatch):
    log = MetricsLogger(tmp_path, report_to=["jsonl"])
    for s in range(1, 6):
        log.log(s, {"x": float(s)})
    log.close()

    def crash(src, dst):
        raise OSError(errno.EIO, "simulated crash during the rewrite")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(WriteError):
        MetricsLogger(tmp_path, report_to=["jsonl"], resume_step=3)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5]  # nothing lost
    monkeypatch.undo()
    MetricsLogger(tmp_path, report_to=["jsonl"], resume_step=3).close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_resume_accepts_safe_overrides_and_refuses_the_rest(tmp_path):
    cfg = load_config(_yaml(tmp_path, steps=2))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    save_checkpoint(tmp_path, 1, {}, {"config": cfg.model_dump(mode="json")})
    assert resume_config(tmp_path, ["steps=5", "log.progress=true", "checkpoint.every=1"]).steps == 5
    with pytest.raises(ConfigError, match=r"cannot change optim.lr: 1e-05 -> 0.5"):
        resume_config(tmp_path, ["optim.lr=0.5"])
    edited = yaml.safe_load((tmp_path / "config.yaml").read_text())
    edited["optim"]["lr"] = 0.1  # an edited config.yaml is not silently used either
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(edited))
    with pytest.raises(ConfigError, match=r"optim.lr: 1e-05 -> 0.1"):
        resume_config(tmp_path)


def test_full_disk_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {})

    def full(obj, f, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:642] . PytorchStreamWriter failed writing file data/0: "
                           "file write failed; basic_ios::clear: iostream error")  # fmt: skip

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(ckpt_mod.shutil, "disk_usage", lambda p: type("U", (), {"free": 0})())
    with pytest.raises(WriteError) as e:
        save_checkpoint(tmp_path, 2, {"w": torch.zeros(1)}, {})
    assert str(e.value).startswith("no space left on device while writing ") and "state.pt" in str(e.value)
    assert latest_checkpoint(tmp_path).name == "step-000001"
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
