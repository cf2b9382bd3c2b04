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


def test_a_run_s_checkpoint_is_in_trls_layout_and_transformers_reads_it(tmp_path):
    """checkpoint-N/ as a transformers / TRL trainer writes it: the model in HF format, optimizer.pt,
    scheduler.pt, rng_state.pth (TRL's keys), trainer_state.json with TRL's metric names (issue 37, item 9)."""
    from transformers import AutoModelForCausalLM, TrainerState
    from transformers.trainer_utils import get_last_checkpoint

    from covey.train.config import load_config
    from covey.train.run import train

    cfg = load_config(None, ["model.name=tiny-llama", "rollout.prompts_per_step=2", "rollout.group_size=2",
                             "sampling.max_new_tokens=2", "reward_workers=0", "log.report_to=[jsonl]", "log.progress=false",
                             "steps=1", "threads=1", "eval.size=0", "checkpoint.every=1"])  # fmt: skip
    train(cfg, tmp_path / "run")
    ckpt = tmp_path / "run" / "checkpoint-1"
    assert get_last_checkpoint(str(tmp_path / "run")) == str(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt)  # the policy, loadable as it is
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), final.state_dict().values(), strict=True))
    optim = torch.load(ckpt / "optimizer.pt", weights_only=False)
    assert set(optim) == {"state", "param_groups"} and optim["state"]  # AdamW's moments after one update
    assert "last_epoch" in torch.load(ckpt / "scheduler.pt", weights_only=False)
    assert {"python", "numpy", "cpu"} <= set(torch.load(ckpt / "rng_state.pth", weights_only=False))
    state = TrainerState.load_from_json(str(ckpt / "trainer_state.json"))
    assert state.global_step == 1 and state.max_steps == 1
    logged = [e for e in state.log_history if "reward" in e]
    assert len(logged) == 1 and {"reward", "reward_std", "completions/mean_length", "step"} <= set(logged[0])
