import json
import os

import torch

from covey.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from covey.train.metrics import MetricsLogger, read_metrics
from covey.train.plots import plot_run


def test_checkpoint_roundtrip_and_keep_last(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"w": torch.full((2,), float(step))}, {"sampler": {"pos": step}}, keep=2)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["checkpoint-2", "checkpoint-3"]  # TRL's names (and transformers' get_last_checkpoint finds them)
    payload, meta = load_checkpoint(latest_checkpoint(tmp_path))
    assert torch.equal(payload["w"], torch.full((2,), 3.0)) and meta["step"] == 3 and meta["sampler"]["pos"] == 3


def test_half_written_checkpoint_is_ignored(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.zeros(1)}, {})
    # a kill during writing leaves only a temp folder, never a checkpoint-* folder
    os.makedirs(tmp_path / ".tmp-checkpoint-2-123")
    assert latest_checkpoint(tmp_path).name == "checkpoint-1"


def test_incomplete_checkpoint_folder_gives_clear_error(tmp_path):
    (tmp_path / "step-000001").mkdir()
    try:
        load_checkpoint(tmp_path / "step-000001")
    except FileNotFoundError as e:
        assert "not a complete covey checkpoint" in str(e)
    else:
        raise AssertionError("incomplete checkpoint loaded")


def test_metrics_resume_truncates_to_resumed_step(tmp_path):
    log = MetricsLogger(tmp_path, report_to=["jsonl"])
    for s in (1, 2, 3):
        log.log(s, {"reward/mean": s / 10})
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "rew')  # a line cut by SIGKILL
    log = MetricsLogger(tmp_path, report_to=["jsonl"], resume_step=2)
    log.log(3, {"reward/mean": 0.9})
    log.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["reward/mean"] == 0.9


def test_nan_metrics_become_null_and_plots_are_written(tmp_path):
    log = MetricsLogger(tmp_path, report_to=["jsonl", "tensorboard"])
    for s in range(1, 4):
        log.log(s, {"reward/mean": s * 0.1, "kl/mean": float("nan"), "time/step": 1.0})
    log.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["kl/mean"] is None
    files = {p.name for p in plot_run(tmp_path)}
    assert {"reward.png", "time.png"} <= files and "kl_entropy.png" not in files
    assert any((tmp_path / "tb").iterdir())
