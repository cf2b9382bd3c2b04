"""Shared by the kill -9 tests: a straight run vs a run SIGKILLed after a checkpoint and resumed."""

import os
import signal
import subprocess
import sys
import time

import torch
import yaml

from covey.train.checkpoint import checkpoint_dir, latest_checkpoint, load_checkpoint, saved_weights
from covey.train.metrics import read_metrics

COVEY = [sys.executable, "-m", "covey.cli"]
ENV = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}  # like the in-process tests (conftest)


def comparable(row: dict) -> dict:
    """A metrics row without the keys that measure the machine (times, throughput, memory)."""
    return {k: v for k, v in row.items() if not k.startswith(("time/", "throughput/", "reward/seconds", "memory/", "weight_sync/"))}


def kill_and_resume(tmp_path, cfg: dict, kill_at: int = 2, inspect=None):
    """Train `cfg` straight, and again killed (SIGKILL) once the step-`kill_at` checkpoint exists,
    then resumed. `inspect(path)` sees the killed run's checkpoint before the resume. Asserts equal
    metrics and bit-equal weights; returns (straight metrics, straight payload, resumed payload).
    The straight run goes on beside the killed one and its resume (separate processes, each
    single-threaded: the second core of a 2-core machine takes it)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    log = tmp_path / "straight.log"
    with log.open("w") as f:
        straight_proc = subprocess.Popen(COVEY + ["train", str(path), "--run-dir", str(straight)], env=ENV,
                                         stdout=f, stderr=subprocess.STDOUT)  # fmt: skip
    procs = [straight_proc]
    try:
        proc = subprocess.Popen(COVEY + ["train", str(path), "--run-dir", str(killed)], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        procs.append(proc)
        ckpt = checkpoint_dir(killed, kill_at)
        deadline = time.time() + 300
        while not ckpt.exists():
            assert proc.poll() is None and time.time() < deadline, f"run ended before its step-{kill_at} checkpoint"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if inspect is not None:
            inspect(ckpt)
        subprocess.run(COVEY + ["train", "--resume", str(killed)], check=True, env=ENV, capture_output=True)
        assert straight_proc.wait() == 0, log.read_text()[-3000:]
    finally:
        for p in procs:  # after a failed assertion above: leave no run behind
            if p.poll() is None:
                p.kill()
                p.wait()
    a = [comparable(r) for r in read_metrics(straight / "metrics.jsonl")]
    b = [comparable(r) for r in read_metrics(killed / "metrics.jsonl")]
    assert a == b
    wa, _ = load_checkpoint(latest_checkpoint(straight))
    wb, _ = load_checkpoint(latest_checkpoint(killed))
    ma, mb = saved_weights(latest_checkpoint(straight)), saved_weights(latest_checkpoint(killed))
    assert ma and ma.keys() == mb.keys()
    for name in ma:
        assert torch.equal(ma[name], mb[name]), name
    return a, wa, wb
