"""Preference mode end to end on tiny-llama: every loss from config, refused combinations,
micro-batches that add up, exact resume."""

import json

import pytest
import torch

from covey.train.config import ConfigError, load_config
from covey.train.metrics import read_metrics
from covey.train.trainer import Trainer

@pytest.fixture
def digits(toy_reward_module):
    """A dense toy reward (tests/conftest.py): online groups nearly always hold a preference."""
    return toy_reward_module


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"What is {a} + {a}?", "chosen": f"The answer is {2 * a}.", "rejected": f"I think {2 * a + 1}."}
            for a in range(12)]  # fmt: skip
    rows[3] = {"prompt": [{"role": "user", "content": "What is 3 + 3?"}],
               "chosen": [{"role": "assistant", "content": "6"}], "rejected": [{"role": "assistant", "content": "7"}]}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _base(tmp_path):
    return ["model.name=tiny-llama", "model.dtype=fp32", "engine.dtype=fp32", "sampling.max_new_tokens=8",
            "reward_workers=0", "log.progress=false", "log.report_to=[jsonl]", "optim.lr=1e-3", f"log.dir={tmp_path}"]  # fmt: skip


def _online(tmp_path, digits, *overrides):
    return load_config(None, _base(tmp_path) + [
        "task.name=arithmetic", "task.params={digits: 1, n_train: 32, n_test: 8}", f"rewards=[{{name: '{digits}'}}]",
        "task_reward_weight=0.0", "rollout.prompts_per_step=3", "rollout.group_size=3", *overrides])  # fmt: skip


def _offline(tmp_path, pairs_file, *overrides):
    return load_config(None, _base(tmp_path) + [
        "task.name=dataset", f"task.params={{path: '{pairs_file}', verifier: none}}", "rollout.strategy=offline_pairs",
        "rollout.prompts_per_step=4", "rollout.group_size=2", "preference={loss: dpo}", *overrides])  # fmt: skip


def _train(cfg, run_dir, steps):
    trainer = Trainer(cfg, run_dir)
    try:
        for _ in range(steps):
            trainer.step()
        return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, trainer.last_metrics
    finally:
        trainer.close()


@pytest.mark.parametrize("pref", [
    "{loss: dpo}",
    "{loss: {name: dpo, loss_type: hinge}, pairs: {name: rso, beta_rs: 0.5, accept: 2}}",
    "{loss: {name: dpo, loss_type: ipo}, pairs: all_pairs}",
    "{loss: tgdpo, guide_model: tiny-llama}",
    "{loss: gepo_provisional, pairs: {name: sets, threshold: 0.1}}",
])  # fmt: skip
def test_online_losses_train(tmp_path, digits, pref):
    before = None
    cfg = _online(tmp_path, digits, f"preference={pref}", "steps=2")
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        for _ in range(2):
            m = trainer.step()
        assert m["pref/units"] >= 1 and "learn/loss" in m
        after = trainer.model.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before)
    finally:
        trainer.close()


def test_xpo_trains_with_reference_samples(tmp_path, digits):
    cfg = _online(tmp_path, digits, "rollout.strategy={name: reference_pairs, reference_n: 1}", "rollout.group_size=2",
                  "preference={loss: {name: xpo, alpha: 0.01}, pairs: xpo}")  # fmt: skip
    _, m = _train(cfg, tmp_path / "run", 1)
    assert m["pref/reference_rows_frac"] == pytest.approx(1 / 3)
    assert m["pref/pairs"] == 6 and "pref/xpo_loss" in m


def test_offline_dpo_learns_the_pairs(tmp_path, pairs_file):
    cfg = _offline(tmp_path, pairs_file, "steps=8", "optim.lr=3e-3", "rollout.prompts_per_step=12")
    _, m = _train(cfg, tmp_path / "run", 8)
    first = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert first["learn/loss"] == pytest.approx(0.6931, abs=1e-3)  # policy = reference at step 1
    assert m["learn/loss"] < 0.6 and m["pref/accuracy"] == 1.0 and m["pref/pairs"] == 12


def _grads(cfg, run_dir):
    trainer = Trainer(cfg, run_dir)
    try:
        trainer.step()  # the gradient of the step's one optimizer step stays in .grad
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    finally:
        trainer.close()


def test_micro_batches_add_up(tmp_path, pairs_file):
    """Whole-group micro-batches accumulate the one-batch gradient (each unit's loss over all units)."""
    a = _grads(_offline(tmp_path, pairs_file, "optim.grad_clip=null"), tmp_path / "a")
    b = _grads(_offline(tmp_path, pairs_file, "optim.grad_clip=null", "optim.micro_batch_size=2"), tmp_path / "b")
    assert a.keys() == b.keys() and a
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-7)


def test_resume_is_exact(tmp_path, digits):
    straight, _ = _train(_online(tmp_path, digits, "preference={loss: dpo}", "steps=2"), tmp_path / "a", 2)
    cfg = _online(tmp_path, digits, "preference={loss: dpo}", "steps=2")
    first = Trainer(cfg, tmp_path / "b")
    first.step()
    first.save()
    first.close()
    again = Trainer(cfg, tmp_path / "b", resume=True)
    try:
        again.step()
        resumed = again.model.state_dict()
    finally:
        again.close()
    for k in straight:
        assert torch.equal(straight[k], resumed[k]), k


@pytest.mark.parametrize("overrides,match", [
    (["preference={loss: dpo}", "algo=dapo"], "remove `algo`"),
    (["preference={loss: tgdpo}"], "guide_model"),
    (["preference={loss: xpo}"], "needs preference.pairs 'xpo'"),
    (["preference={loss: xpo, pairs: xpo}"], "reference_pairs"),
    (["preference={loss: dpo, pairs: sets}"], "gepo_provisional"),
    (["rollout.strategy=reference_pairs", "preference={loss: dpo}"], "only preference.pairs xpo"),
    (["rollout.strategy=offline_pairs"], "add a `preference:` section"),
    (["preference={loss: {name: dpo, beta: x}}"], "beta"),
    (["preference={loss: kto}"], "kto"),
])  # fmt: skip
def test_contradictions_refused_when_read(tmp_path, digits, overrides, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        _online(tmp_path, digits, *overrides)


def test_offline_pairs_refuse_rewards(tmp_path, pairs_file, digits):
    with pytest.raises((ConfigError, ValueError), match="remove them"):
        _offline(tmp_path, pairs_file, f"rewards=[{{name: '{digits}'}}]")
