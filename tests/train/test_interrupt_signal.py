"""Ctrl-C inside a step (covey.train.interrupt): the step stops at a safe point, the last completed step is
saved exactly (a resume then equals a straight run bit for bit), a second Ctrl-C exits at once, the exit
code and the Python API say it was interrupted."""

import os
import signal

import pytest
import torch
from typer.testing import CliRunner

from covey.train.checkpoint import checkpoint_dir, latest_checkpoint, saved_weights
from covey.train.config import load_config
from covey.train.interrupt import TrainingInterrupted
from covey.train.metrics import read_metrics
from covey.train.run import train
from covey.train.trainer import Trainer

CFG = ["model.name=tiny-llama", "task.name=arithmetic", "task.params.digits=1", "task.params.n_train=32", "task.params.n_test=4",
       "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=4", "reward_workers=0",
       "log.report_to=[jsonl]", "log.progress=false", "threads=1", "algo.kl=null", "optim.micro_batch_size=2",
       "optim.lr=1e-3"]  # fmt: skip


def _cfg(*more):
    return load_config(None, CFG + list(more))


def varied(completions, **kw):
    """Rewards that differ within a group (the tiny random model never answers right): a gradient every step."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # chat or text completions
    return [len(set(t)) / 4 for t in texts]


def _trainer(cfg, run, resume=False):
    return Trainer(cfg, run, resume=resume, reward_funcs=[varied])


def _signal_at(trainer, step: int, where: str, times: int = 1):
    """Send this process SIGINT `times` times when step `step` (1-based) reaches `where`: "generate" (inside
    the engine's generate call) or "learn" (after the update's first micro-batch)."""
    if where == "generate":
        real = trainer.engine.generate

        def generate(*a, **k):
            if trainer.step_num == step - 1:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGINT)
            return real(*a, **k)

        trainer.engine.generate = generate
    else:
        real = trainer.learner._backward

        def backward(*a, **k):
            out = real(*a, **k)
            if trainer.step_num == step - 1:
                os.kill(os.getpid(), signal.SIGINT)
            return out

        trainer.learner._backward = backward


def _straight(tmp_path, steps):
    cfg = _cfg(f"steps={steps}")
    train(cfg, tmp_path / "straight", trainer=_trainer(cfg, tmp_path / "straight"))
    return saved_weights(latest_checkpoint(tmp_path / "straight"))


@pytest.mark.parametrize("where", ["generate", "learn"])
def test_ctrl_c_inside_a_step_saves_the_last_completed_step_and_resumes_bit_exactly(tmp_path, where):
    cfg = _cfg("steps=4")
    trainer = _trainer(cfg, tmp_path / "run")
    _signal_at(trainer, 3, where)
    with pytest.raises(TrainingInterrupted) as e:  # a KeyboardInterrupt, as TRL lets one through
        train(cfg, tmp_path / "run", trainer=trainer)
    assert isinstance(e.value, KeyboardInterrupt) and e.value.signum == signal.SIGINT
    assert e.value.summary["step"] == 2 and e.value.summary["checkpoint"] == str(checkpoint_dir(tmp_path / "run", 2))
    assert trainer.rewound  # step 3 stopped before its optimizer step and was rewound
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]["learn/grad_norm"] > 0
    resumed = _trainer(cfg, tmp_path / "run", resume=True)
    train(cfg, tmp_path / "run", resume=True, trainer=resumed)
    ours, straight = saved_weights(latest_checkpoint(tmp_path / "run")), _straight(tmp_path, 4)
    assert ours.keys() == straight.keys()
    assert all(torch.equal(ours[k], straight[k]) for k in ours)  # as if never stopped


def test_a_second_ctrl_c_exits_at_once_and_writes_no_checkpoint(tmp_path):
    cfg = _cfg("steps=4", "checkpoint.every=1")
    trainer = _trainer(cfg, tmp_path / "run")
    _signal_at(trainer, 3, "generate", times=2)
    with pytest.raises(TrainingInterrupted) as e:
        train(cfg, tmp_path / "run", trainer=trainer)
    assert e.value.summary["aborted"] and e.value.summary["step"] == 2
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    Trainer(cfg, tmp_path / "run", resume=True).close()  # the folder's lock was released


def test_an_error_after_the_first_optimizer_step_keeps_the_exact_checkpoint(tmp_path):
    """Two optimizer steps per batch: an error in the second leaves a half-applied update, which is never
    saved over the periodic checkpoint of the step before."""
    cfg = _cfg("steps=3", "checkpoint.every=1", "optim.mini_batches=2")
    trainer = _trainer(cfg, tmp_path / "run")
    real, calls = trainer.learner._step, []

    def step(*a, **k):
        if trainer.step_num == 1:
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("boom")
        return real(*a, **k)

    trainer.learner._step = step
    with pytest.raises(RuntimeError, match="boom"):
        train(cfg, tmp_path / "run", trainer=trainer)
    assert not trainer.rewound  # past the first optimizer step: nothing to rewind
    ckpt = latest_checkpoint(tmp_path / "run")
    assert ckpt.name == "checkpoint-1"
    saved = saved_weights(ckpt)
    name = next(n for n, p in trainer.model.named_parameters() if p.requires_grad and n in saved)
    assert not torch.equal(saved[name], dict(trainer.model.named_parameters())[name].detach())  # the half update is not in it


def test_cli_exit_code_130_after_ctrl_c(tmp_path, monkeypatch):
    from covey.cli import app
    from covey.engine import TorchEngine

    real, seen = TorchEngine.generate, []

    def generate(self, *a, **k):
        seen.append(1)
        if len(seen) == 2:  # step 2's generation (the first call is step 1's)
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, *a, **k)

    monkeypatch.setattr(TorchEngine, "generate", generate)
    res = CliRunner().invoke(app, ["train", *CFG, "steps=5", "--run-dir", str(tmp_path / "run")])
    assert res.exit_code == 130, res.output
    assert "Ctrl-C: stopping at the next safe point" in res.output
    assert f"resume with:\n  covey train --resume {tmp_path / 'run'}" in res.output
    assert '"interrupted": true' in res.output and latest_checkpoint(tmp_path / "run").name == "checkpoint-1"
