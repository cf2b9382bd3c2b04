"""No lost or corrupted runs: SIGTERM saves, one process per folder, atomic re-saves and metric
rewrites, safe resume overrides only, a full disk named in one line."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from covey.train import checkpoint as ckpt_mod
from covey.train.checkpoint import WriteError, latest_checkpoint, load_checkpoint, save_checkpoint, saved_weights
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
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]  # 143: the exit code says it was stopped
    assert "SIGTERM" in out and "resume with:\n  covey train --resume " + str(run) in out
    step = latest_checkpoint(run)
    assert step is not None and ckpt_mod.checkpoint_step(step) >= 1
    res = subprocess.run(COVEY + ["train", "--resume", str(run), "steps=" + str(ckpt_mod.checkpoint_step(step) + 1)],
                         env=ENV, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert read_metrics(run / "metrics.jsonl")[-1]["step"] == ckpt_mod.checkpoint_step(step) + 1
    # the override is now the run's config: a later plain --resume does not fall back to steps=500
    assert yaml.safe_load((run / "config.yaml").read_text())["steps"] == ckpt_mod.checkpoint_step(step) + 1
    prov = json.loads((run / "provenance.json").read_text())  # the first start's record, the resume appended
    assert prov["command"][-2:] == ["--run-dir", str(run)] and prov["resumes"][0]["command"][-1].startswith("steps=")


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


def test_a_run_that_fails_to_start_leaves_no_empty_folder(tmp_path):
    from covey.train.trainer import Trainer

    cfg = load_config(_yaml(tmp_path), ["task.name=nope"])
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        Trainer(cfg, tmp_path / "new-run")
    assert not (tmp_path / "new-run").exists()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        Trainer(cfg, tmp_path / "used")
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine"  # a folder with content is left alone


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
    assert not (tmp_path / "checkpoint-3").exists()  # the state a kill leaves today
    found = latest_checkpoint(tmp_path)  # the old copy, where it was moved aside (readers do not move it)
    assert found is not None and found.name == ".aside-checkpoint-3"
    payload, meta = load_checkpoint(found)
    assert meta["step"] == 3 and meta["tag"] == "first" and torch.equal(payload["w"], torch.ones(2))
    save_checkpoint(tmp_path, 2, {"w": torch.zeros(2)}, {"tag": "older"}, keep=1)  # the writer settles leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3"]
    assert load_checkpoint(latest_checkpoint(tmp_path))[1]["tag"] == "first"


def test_checkpoint_leftovers_of_kills_are_ignored_then_cleaned(tmp_path):
    root = tmp_path
    save_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {"tag": "one"}, keep=5)
    save_checkpoint(tmp_path, 2, {"w": torch.ones(1)}, {"tag": "two"}, keep=5)
    (root / ".tmp-checkpoint-9-123").mkdir()  # a kill while writing step 9
    (root / ".tmp-checkpoint-9-123" / "state.pt").write_bytes(b"half")
    (root / ".trash-checkpoint-8-123").mkdir()  # a pruning cut short: renamed away, half deleted
    (root / ".trash-checkpoint-8-123" / "state.pt").write_bytes(b"old")
    shutil.copytree(root / "checkpoint-2", root / ".aside-checkpoint-2")  # killed after the new copy landed
    assert latest_checkpoint(tmp_path).name == "checkpoint-2"
    save_checkpoint(tmp_path, 3, {"w": torch.ones(1)}, {"tag": "three"}, keep=5)
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]


def test_checkpoints_of_the_older_layout_resume_and_are_pruned(tmp_path):
    """RUN/checkpoints/step-NNNNNN (covey before issue 37, weights in state.pt) is still found; the next saves
    in TRL's layout prune it like their own, and its half-deleted folders go."""
    old = tmp_path / "checkpoints" / "step-000004"
    old.mkdir(parents=True)
    torch.save({"model": {"w": torch.ones(2)}, "rng": {"python": None}}, old / "state.pt")
    (old / "meta.json").write_text(json.dumps({"step": 4, "tag": "old"}))
    (tmp_path / "checkpoints" / "step-000002").mkdir()  # a pruning cut short in the old layout
    (tmp_path / "checkpoints" / "step-000002" / "state.pt").write_bytes(b"old")
    assert latest_checkpoint(tmp_path) == old
    assert torch.equal(saved_weights(old)["w"], torch.ones(2))
    save_checkpoint(tmp_path, 5, {"w": torch.zeros(1)}, {"tag": "new"}, keep=2)
    assert latest_checkpoint(tmp_path).name == "checkpoint-5" and old.is_dir()
    save_checkpoint(tmp_path, 6, {"w": torch.zeros(1)}, {"tag": "newer"}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5", "checkpoint-6"]  # the old folder pruned


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


@pytest.mark.parametrize("schedule, warns", [("cosine", True), ("constant", False)])
def test_changing_steps_on_resume_warns_when_the_schedule_stretches(tmp_path, caplog, schedule, warns):
    cfg = load_config(_yaml(tmp_path, steps=2), [f"optim.schedule={schedule}"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    save_checkpoint(tmp_path, 1, {}, {"config": cfg.model_dump(mode="json")})
    with caplog.at_level("WARNING", logger="covey"):
        resume_config(tmp_path, ["steps=5"])
    assert ("learning-rate schedule is stretched" in caplog.text) is warns


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
    assert latest_checkpoint(tmp_path).name == "checkpoint-1"
    assert not list(tmp_path.glob(".tmp-*"))


def test_full_disk_during_training_is_one_error_line_and_exit_2(tmp_path, monkeypatch):
    """Through the CLI: the step-2 checkpoint hits ENOSPC; step 1's checkpoint stays loadable."""
    from typer.testing import CliRunner

    from covey.cli import app

    real_save = torch.save

    def save(obj, f, *a, **k):
        if "checkpoint-2" in getattr(f, "name", ""):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", str(_yaml(tmp_path, steps=3, checkpoint={"every": 1, "keep": 1})), "--run-dir", str(run)])
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: no space left on device while writing {run}/.tmp-checkpoint-2-{os.getpid()}/optimizer.pt"]
    assert "Traceback" not in res.output and "iostream" not in res.output
    payload, meta = load_checkpoint(latest_checkpoint(run))
    assert meta["step"] == 1 and "optimizer" in payload and saved_weights(latest_checkpoint(run))


def _damage(path, how):
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "empty": b""}[how])


@pytest.mark.parametrize("name, how", [("state.pt", "truncate"), ("state.pt", "empty"), ("meta.json", "truncate"),
                                       ("meta.json", "empty"), ("optimizer.pt", "truncate"), ("rng_state.pth", "empty")])
def test_a_damaged_latest_checkpoint_falls_back_to_the_older_one(tmp_path, caplog, name, how):
    for step, tag, w in ((1, "one", torch.ones(2)), (2, "two", torch.zeros(2))):
        save_checkpoint(tmp_path, step, {"w": w, "optimizer": {"s": w}, "rng": {"python": None}}, {"tag": tag}, keep=2)
    bad = tmp_path / "checkpoint-2" / name
    _damage(bad, how)
    ckpt_mod._warned.clear()
    with caplog.at_level("WARNING", logger="covey"):
        assert latest_checkpoint(tmp_path).name == "checkpoint-1"
        path, payload, meta = ckpt_mod.load_latest_checkpoint(tmp_path)
    assert path.name == "checkpoint-1" and meta["tag"] == "one" and torch.equal(payload["w"], torch.ones(2))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith(f"{bad} is damaged") and "older checkpoint checkpoint-1" in warnings[0]
    with pytest.raises(ckpt_mod.CheckpointDamaged, match=f"^{bad} is damaged"):
        load_checkpoint(bad.parent)


def test_a_checkpoint_whose_tensors_do_not_load_is_passed_over(tmp_path, caplog):
    import zipfile

    save_checkpoint(tmp_path, 1, {"w": torch.ones(2)}, {}, keep=2)
    save_checkpoint(tmp_path, 2, {"w": torch.zeros(2)}, {}, keep=2)
    bad = tmp_path / "checkpoint-2" / "state.pt"
    with zipfile.ZipFile(bad, "w") as z:  # a whole zip, but not a torch archive
        z.writestr("junk", b"x")
    assert latest_checkpoint(tmp_path).name == "checkpoint-2"  # its directory looks whole
    ckpt_mod._warned.clear()
    with caplog.at_level("WARNING", logger="covey"):
        path, payload, _ = ckpt_mod.load_latest_checkpoint(tmp_path)
    assert path.name == "checkpoint-1" and torch.equal(payload["w"], torch.ones(2))
    assert f"{bad} is damaged" in caplog.text


def test_no_intact_checkpoint_names_each_damaged_file(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(2)}, {}, keep=2)
    save_checkpoint(tmp_path, 2, {"w": torch.zeros(2)}, {}, keep=2)
    _damage(tmp_path / "checkpoint-1" / "meta.json", "truncate")
    _damage(tmp_path / "checkpoint-2" / "state.pt", "empty")
    with pytest.raises(ckpt_mod.CheckpointDamaged) as e:
        latest_checkpoint(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"no intact checkpoint in {tmp_path}: ") and "\n" not in msg
    assert "checkpoint-2/state.pt is damaged (0 bytes" in msg and "checkpoint-1/meta.json is damaged" in msg


def test_resume_past_a_damaged_checkpoint_through_the_cli(tmp_path, monkeypatch):
    """Train 2 steps (a checkpoint each, keep 2), truncate step 2: the resume warns and redoes step 2 from
    step 1; with every checkpoint damaged, the resume is one error line, exit 2, before the model loads."""
    from typer.testing import CliRunner

    from covey.cli import app

    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", str(_yaml(tmp_path, steps=2, checkpoint={"every": 1, "keep": 2})), "--run-dir", str(run)])
    assert res.exit_code == 0, res.output
    bad = run / "checkpoint-2" / "model.safetensors"  # the weights, in TRL's layout
    _damage(bad, "truncate")
    ckpt_mod._warned.clear()
    res = subprocess.run(COVEY + ["train", "--resume", str(run)], env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"{bad} is damaged" in res.stderr and "resuming from the older checkpoint checkpoint-1" in res.stderr
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if "loss" in str(r)][-1] == 2
    assert load_checkpoint(latest_checkpoint(run))[1]["step"] == 2  # step 2 saved again, whole
    for step in ("checkpoint-1", "checkpoint-2"):
        _damage(run / step / "meta.json", "truncate")
    import covey.train.setup as setup

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(setup, "load_policy", no_model)
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "steps=3"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: no intact checkpoint in {run}: "), res.output


EXITING_REWARD = '''
import os
calls = []

def quit(prompts, completions, **kw):
    calls.append(1)
    if len(calls) == 2:
        os._exit(0)
    return [0.0 for _ in completions]

def quit_caught(prompts, completions, **kw):
    try:
        os._exit(0)
    except BaseException:
        return [1.0 for _ in completions]
'''


@pytest.mark.parametrize("reward", ["quit", "quit_caught"])
def test_an_in_process_reward_calling_os_exit_cannot_end_the_run_silently(tmp_path, reward):
    """os._exit(0) in an in-process reward used to end `covey train` with status 0, no checkpoint and no
    summary; now it is a RewardCrashed: one error line, exit 2, and the last checkpoint kept."""
    (tmp_path / "exiting.py").write_text(EXITING_REWARD)
    cfg = _yaml(tmp_path, steps=3, checkpoint={"every": 1, "keep": 2},
                rewards=[{"name": f"exiting:{reward}", "in_process": True}])
    run = tmp_path / "run"
    res = subprocess.run(COVEY + ["train", str(cfg), "--run-dir", str(run)], env={**ENV, "PYTHONPATH": f"{tmp_path}:{ENV.get('PYTHONPATH', '')}"},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"reward '{reward}' raised ProcessExit('os._exit(0) was called" in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    done = 1 if reward == "quit" else 0  # the first call of `quit` returns; `quit_caught` exits on its first
    found = latest_checkpoint(run)
    assert found is not None and load_checkpoint(found)[1]["step"] == done


def test_os_exit_interception_spares_forked_children_and_sees_other_threads():
    import threading

    from covey.rewards._deadline import ProcessExit, exit_intercepted

    with exit_intercepted():
        pid = os.fork()
        if pid == 0:
            os._exit(7)  # a child the reward forked exits for real
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
    def quietly_exit():  # another thread of the reward, which even catches what the call raises
        try:
            os._exit(3)
        except BaseException as e:  # noqa: BLE001
            seen.append(e)

    seen = []
    with pytest.raises(ProcessExit, match=r"os._exit\(3\)"):
        with exit_intercepted():
            t = threading.Thread(target=quietly_exit)
            t.start()
            t.join()
    assert isinstance(seen[0], ProcessExit)
    assert os._exit.__name__ == "_exit"  # restored


def _read_only(path, cmd):
    """`cmd` run with `path` read-only: a read-only bind mount as root (root ignores permissions),
    mode 0555 otherwise; (command, the expected cause) or None where neither can be made."""
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        return cmd, "permission denied"
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        return None
    mount = f"mount --bind {path} {path} && mount -o remount,bind,ro {path} && exec \"$@\""
    return ["unshare", "-m", "sh", "-c", mount, "sh", *cmd], "read-only file system"


def test_a_read_only_run_folder_is_one_error_line_naming_the_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(_yaml(tmp_path, steps=2))
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    save_checkpoint(run, 1, {"model": {}}, {"config": cfg.model_dump(mode="json")})
    for cmd, path in ((COVEY + ["train", "--resume", str(run)], run / ".lock"),
                      (COVEY + ["train", str(_yaml(tmp_path)), "--run-dir", str(run / "sub")], run / "sub")):
        made = _read_only(run, cmd)
        if made is None:
            pytest.skip("cannot make a read-only folder here (root without mount namespaces)")
        res = subprocess.run(made[0], env=ENV, capture_output=True, text=True, timeout=300)
        os.chmod(run, 0o755)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        cause = made[1]
        assert errors in ([f"error: cannot write {path}: {cause}"], [f"error: {path}: {cause}"]), res.stderr
