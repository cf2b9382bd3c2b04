"""A stateful sampler survives kill -9 + resume bit-exactly (same metrics, same weights, same state)."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from covey.train.checkpoint import latest_checkpoint, load_checkpoint
from covey.train.metrics import read_metrics
from tests.train.test_trainer_e2e import _compare_keys


@pytest.mark.slow  # three CLI runs in subprocesses (~70 s on the loaded 2-core machine)
@pytest.mark.parametrize("sampler", [{"name": "vade", "lambda_short": 0.7}])
def test_resume_after_sigkill_is_exact_with_a_stateful_sampler(tmp_path, sampler):
    cfg = {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 24, "n_test": 8}},
        "sampler": sampler,
        "rollout": {"prompts_per_step": 4, "group_size": 2},
        "sampling": {"max_new_tokens": 4},
        "algo": {"preset": "grpo", "kl": None},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "checkpoint": {"every": 2},
        "steps": 4,
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    covey = [sys.executable, "-m", "covey.cli"]
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(covey + ["train", str(path), "--run-dir", str(straight)], check=True, env=env, capture_output=True)
    proc = subprocess.Popen(covey + ["train", str(path), "--run-dir", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 120
    while not (killed / "checkpoints" / "step-000002").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before its step-2 checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    subprocess.run(covey + ["train", "--resume", str(killed)], check=True, env=env, capture_output=True)

    a = [_compare_keys(r) for r in read_metrics(straight / "metrics.jsonl")]
    b = [_compare_keys(r) for r in read_metrics(killed / "metrics.jsonl")]
    assert a == b and any(k.startswith("sampler/vade/") for k in a[-1])
    wa, _ = load_checkpoint(latest_checkpoint(straight))
    wb, _ = load_checkpoint(latest_checkpoint(killed))
    for name in wa["model"]:
        assert torch.equal(wa["model"][name], wb["model"][name]), name
    for key, val in wa["sampler"].items():
        assert torch.equal(val, wb["sampler"][key]) if isinstance(val, torch.Tensor) else val == wb["sampler"][key], key
