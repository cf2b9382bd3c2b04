"""End-to-end training on the tiny model: learning, every preset, exact resume after SIGKILL."""


import pytest
import torch

from covey.algos import PRESETS
from covey.train.metrics import read_metrics
from covey.train.trainer import Trainer
from tests._configs import tiny_config
from tests._kill_resume import kill_and_resume

def test_grpo_raises_reward_on_a_trivial_task(tmp_path, toy_reward_module):
    cfg = tiny_config(tmp_path, f"rewards=[{{name: '{toy_reward_module}'}}]", "task_reward_weight=0.0",
               "rollout.group_size=8", "steps=12")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    rewards = [trainer.step()["reward/mean"] for _ in range(cfg.steps)]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.1, rewards


@pytest.mark.parametrize("preset", sorted(p for p in PRESETS if "likelihood" not in PRESETS[p]))  # diffusion: tests/likelihood
def test_every_preset_runs_one_step(tmp_path, preset):
    # the base config has no KL: a preset's reference reset has no reference to reset then
    no_reset = ["algo.reference_reset=null"] if PRESETS[preset].get("reference_reset") else []
    cfg = tiny_config(tmp_path, f"algo.preset={preset}", "steps=1", "optim.lr=1e-4", *no_reset)
    trainer = Trainer(cfg, tmp_path / preset)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    m = trainer.step()
    assert m["time/step"] > 0 and all(v is None or v == v for v in m.values() if isinstance(v, float))
    rows = read_metrics(tmp_path / preset / "metrics.jsonl")
    assert rows[-1]["step"] == 1
    if m.get("adv/zero_signal_groups", 1.0) < 1.0:  # some signal: weights must have moved
        assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


@pytest.mark.slow  # two `covey train` processes, one killed with SIGKILL and resumed
def test_resume_after_sigkill_is_exact(tmp_path):
    cfg = {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 64, "n_test": 16}},
        "rollout": {"prompts_per_step": 4, "group_size": 4},
        "sampling": {"max_new_tokens": 8},
        "algo": {"preset": "dapo"},
        "optim": {"lr": 3e-3, "mini_batches": 2, "micro_batch_size": 4},
        "reward_workers": 0,
        "log": {"progress": False, "tensorboard": False},
        "checkpoint": {"every": 2},
        "steps": 4,
    }
    kill_and_resume(tmp_path, cfg)


def test_resume_keeps_the_dtypes_that_auto_chose(tmp_path, monkeypatch):
    """dtype: auto is a per-process measurement; a resumed run must not switch dtype midway when the
    new process measures the other way (a machine where bf16 and fp32 are close)."""
    import json

    from covey import dtypes

    cfg = tiny_config(tmp_path, "model.dtype=auto", "engine.dtype=auto", "steps=2")
    first = Trainer(cfg, tmp_path / "run")
    first.step()
    chosen = first.dtypes()
    meta = json.loads((first.save() / "meta.json").read_text())
    first.close()
    assert meta["dtypes"] == chosen and set(chosen.values()) <= {"bf16", "fp32"}

    flip = "fp32" if chosen["learner"] == "bf16" else "bf16"
    monkeypatch.setattr(dtypes, "cpu_prefers_bf16", lambda *a, **k: flip == "bf16")
    resumed = Trainer(cfg, tmp_path / "run", resume=True)
    assert resumed.dtypes() == chosen and resumed.step_num == 1
    resumed.close()
    fresh = Trainer(cfg, tmp_path / "fresh")  # a new run follows this process's measurement
    assert fresh.dtypes() == {"learner": flip, "engine": flip}
    fresh.close()
    pinned = Trainer(tiny_config(tmp_path, "model.dtype=fp32", "engine.dtype=fp32", "steps=2"), tmp_path / "run", resume=True)
    assert pinned.dtypes() == {"learner": "fp32", "engine": "fp32"}  # an explicit dtype is never replaced
    pinned.close()
