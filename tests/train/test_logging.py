"""The logging users expect: metric sinks, sample completions, plain lines off a terminal."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import yaml

from covey.train.config import load_config
from covey.train.setup import check_run

CFG = {"model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
       "rollout": {"prompts_per_step": 2, "group_size": 2}, "sampling": {"max_new_tokens": 4}, "reward_workers": 0,
       "algo": {"preset": "grpo", "kl": None}, "steps": 2,
       "log": {"report_to": ["jsonl"], "completions_every": 1, "completions_rows": 3}}  # fmt: skip


def test_samples_plain_lines_and_sinks(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(CFG))
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", str(path), "--run-dir", str(run)],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("step ")]
    assert [ln.split(" | ")[0] for ln in lines] == ["step 1/2", "step 2/2"]  # stdout is a pipe: one plain line per step
    assert "samples at step 1" in out.stdout
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1, 1, 1, 2, 2, 2]
    assert {"prompt", "completion", "rewards", "advantage", "group"} <= set(samples[0])
    assert "accuracy" in samples[0]["rewards"]
    assert not (run / "tb").exists()  # tensorboard not in report_to


def test_tensorboard_shorthand_and_wandb_checks():
    assert load_config(None, ["log.tensorboard=false"]).log.report_to == ["jsonl"]
    cfg = load_config(None, ["model.name=tiny-llama", "log.report_to=[jsonl,wandb]"])
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ValueError, match="wandb package is not installed"):
            check_run(cfg)
    else:
        check_run(cfg)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is optional and not installed")
def test_wandb_offline_needs_no_network(tmp_path):
    from covey.train.metrics import MetricsLogger

    log = MetricsLogger(tmp_path, report_to=["jsonl", "wandb"], wandb_mode="offline")
    log.log(1, {"x": 1.0})
    log.close()
    assert (tmp_path / "wandb").is_dir()
