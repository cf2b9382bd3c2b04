"""`runtime.executor: thread` on tiny-llama: parity with inline at max_staleness 0, the bound at 1,
checkpoint/resume, and errors of the generator thread."""

import time

import pytest
import torch

from covey.runtime.thread import GenerationFailed
from covey.train.config import ConfigError
from covey.train.metrics import read_metrics
from covey.train.trainer import Trainer
from tests._configs import tiny_config


def _cfg(tmp_path, *overrides):
    return tiny_config(tmp_path, "steps=3", *overrides)


def _comparable(m: dict) -> dict:
    """A metrics row without timings, the weight transfer's size and the thread executor's own keys (inline has none)."""
    return {k: v for k, v in m.items() if not k.startswith(("time/", "throughput/", "memory/", "reward/seconds", "async/", "weight_sync/"))}


def _train(cfg, run_dir, steps=None, resume=False):
    """(metrics rows, final weights) of `steps` (default: cfg.steps) steps; `resume`: continued from run_dir's last checkpoint."""
    trainer = Trainer(cfg, run_dir, resume=resume)
    try:
        rows = [trainer.step() for _ in range(steps or cfg.steps)]
        weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    finally:
        trainer.close()
    return rows, weights


@pytest.mark.parametrize("extra", [[], ["sampler=vade"]], ids=["uniform", "vade"])
def test_thread_with_zero_staleness_reproduces_inline_bit_exactly(tmp_path, extra):
    """vade: a sampler with feedback (observe, after_update) whose order must not change."""
    inline, w_inline = _train(_cfg(tmp_path, *extra), tmp_path / "inline")
    thread, w_thread = _train(_cfg(tmp_path, "runtime.executor=thread", *extra), tmp_path / "thread")
    assert [_comparable(m) for m in inline] == [_comparable(m) for m in thread]
    assert all(m["async/staleness"] == 0.0 and m["async/token_lag_max"] == 0.0 for m in thread)
    assert "async/staleness" not in inline[0]
    for name, p in w_inline.items():
        assert torch.equal(p, w_thread[name]), name


def test_staleness_one_lags_by_at_most_one_and_trains(tmp_path):
    """interrupt_on_update off: every token of a batch has its admission version (the on case:
    test_thread_interrupt.py)."""
    cfg = _cfg(tmp_path, "runtime.executor=thread", "runtime.max_staleness=1", "steps=4", "runtime.interrupt_on_update=false")
    trainer = Trainer(cfg, tmp_path / "run")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    try:
        rows = [trainer.step() for _ in range(cfg.steps)]
    finally:
        trainer.close()
    lags = [m["async/staleness"] for m in rows]
    assert rows[0]["async/staleness"] == 0.0 and max(lags) == 1.0 and min(lags) >= 0.0, lags
    # every token of a batch comes from the version it was admitted at (no weight change under a generate)
    assert all(m["async/token_lag_max"] == m["async/staleness"] == m["async/token_lag_mean"] for m in rows)
    assert "async/interrupts" not in rows[0]
    assert all(m["loss"] == m["loss"] for m in rows if "loss" in m)
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]["step"] == cfg.steps


@pytest.mark.parametrize("eta", [0, 1])
def test_resume_under_thread(tmp_path, eta):
    """Save after 2 steps while the generator is inside batch 2 (it is finished and saved), resume,
    2 more: exact with eta=0; with eta=1 a carried batch keeps its version and the bound holds.
    (A save before the generator started batch 2 is the inline case: batch 2 is made after resume.)"""
    cfg = _cfg(tmp_path, "runtime.executor=thread", f"runtime.max_staleness={eta}", "steps=4")
    straight, w_straight = _train(cfg, tmp_path / "straight")
    first = Trainer(cfg, tmp_path / "cut")
    try:
        head = [first.step() for _ in range(2)]
        time.sleep(0.5)  # the generator has started batch 2 (eta 0: at version 2): save() finishes and keeps it
        ckpt = first.save()
    finally:
        first.close()
    saved = torch.load(ckpt / "state.pt", weights_only=False)["runtime"]
    assert [r[0] for r in saved["ready"]] == list(range(2, saved["next"]))
    assert saved["ready"] and saved["ready"][0][0] == 2 and saved["ready"][0][3] in ((2,) if eta == 0 else (1, 2))
    resumed = Trainer(cfg, tmp_path / "cut", resume=True)
    try:
        tail = [resumed.step() for _ in range(2)]
        w_cut = {n: p.detach().clone() for n, p in resumed.model.named_parameters()}
    finally:
        resumed.close()
    assert all(m["async/staleness"] <= eta for m in head + tail)
    if eta:
        assert tail[0]["async/staleness"] == 2 - saved["ready"][0][3]  # the carried batch, trained as made
        return
    assert [_comparable(m) for m in straight] == [_comparable(m) for m in head + tail]
    for name, p in w_straight.items():
        assert torch.equal(p, w_cut[name]), name


def test_a_failing_engine_is_a_one_line_error_not_a_hang(tmp_path):
    cfg = _cfg(tmp_path, "runtime.executor=thread", "runtime.max_staleness=1", "runtime.timeout_s=60",
               "engine.name=tests.runtime._engines:FailingEngine", "engine.params={fail_at: 1}")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    t = time.perf_counter()
    try:
        trainer.step()  # batch 0 was made; batch 1's generate raises
        with pytest.raises(GenerationFailed) as e:
            trainer.step()
    finally:
        trainer.close()
    assert time.perf_counter() - t < 60
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("runtime: the generation thread failed generating batch 1 (step 2)")
    assert msg.endswith("RuntimeError: fake engine failure at call 1")


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["runtime.max_staleness=1"], "needs runtime.executor: thread"),
        (["runtime.executor=thread", "runtime.max_staleness=-1"], "greater than or equal to 0"),
        (["runtime.executor=thread", "rollout.strategy=april"], "carries unfinished rollouts"),
        (["runtime.executor=thread", "rollout.strategy={name: dynamic, inner: april}"],
         "carries unfinished rollouts"),
        (["runtime.executor=ray", "rollout.strategy=tppo", "algo.advantage=tppo"], "needs ForkingEngine|optional extra"),
        (["runtime.executor=thread", "model.lora={r: 4}", "algo.kl={name: k1, coef: 0.1, mode: reward}"],
         "KL reward with LoRA"),
        (["runtime.executor=dask"], "'inline', 'thread' or 'ray'"),
        (["runtime.executor=ray", "rollout.strategy=treepo"], "needs ForkingEngine|optional extra"),
        (["runtime.executor=thread", "runtime.timeout_s=0"], "greater than 0"),
        (["runtime.executor=thread", "runtime.engine_workers=2"], "needs runtime.executor: ray"),
        (["runtime.weight_sync=disk"], "needs runtime.executor: ray"),
        (["runtime.executor=ray", "runtime.engine_workers=0"], "greater than or equal to 1"),
    ],
)
def test_refused_runtime_combinations(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, *overrides)


def test_the_cli_reports_a_failing_generator_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "covey.cli", "train", "--run-dir", str(tmp_path / "run"), "model.name=tiny-llama",
           "task.params={digits: 1, n_train: 32, n_test: 8}", "rollout.prompts_per_step=2", "rollout.group_size=2",
           "sampling.max_new_tokens=4", "reward_workers=0", "log.progress=false", "steps=3", "algo.kl=null",
           "runtime.executor=thread", "engine.name=tests.runtime._engines:FailingEngine", "engine.params={fail_at: 1}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2, out.stderr[-2000:]
    assert errors == ["error: runtime: the generation thread failed generating batch 1 (step 2) at policy version 1: "
                      "RuntimeError: fake engine failure at call 1"], out.stderr[-2000:]  # fmt: skip
    assert "Traceback" not in out.stderr


def test_a_hanging_in_process_reward_on_the_generator_thread_times_out_and_the_run_goes_on(tmp_path):
    """It used to hang the generator (no limit off the main thread), so the run stopped with no checkpoint."""
    from tests.rewards import _runner_rewards as rr

    rr.CALLS["hangs_on_second_call"] = 0
    cfg = _cfg(tmp_path, "runtime.executor=thread", "runtime.timeout_s=60",
               "rewards=[{name: tests.rewards._runner_rewards:hangs_on_second_call, timeout_s: 0.5, in_process: true}]",
               "rollout.prompts_per_step=1")  # one chunk per call: the second step's call hangs  # fmt: skip
    rows, _ = _train(cfg, tmp_path / "run")
    assert [r["reward/hangs_on_second_call/failures/timeout"] for r in rows] == [0.0, 1.0, 0.0]  # 1 sample of 4


def test_a_stuck_generator_still_leaves_a_checkpoint_to_resume_from(tmp_path):
    cfg = _cfg(tmp_path, "runtime.executor=thread", "runtime.max_staleness=0", "runtime.timeout_s=3",
               "engine.name=tests.runtime._engines:HangingEngine", "engine.params={hang_at: 1, hang_s: 30}")  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.step()
        with pytest.raises(GenerationFailed, match="no batch from the generation thread within runtime.timeout_s=3"):
            trainer.step()
        path = trainer.save()  # pause() cannot reach a batch boundary: saved without it
    finally:
        trainer.close()
    assert path.name == "checkpoint-1"
    again = Trainer(_cfg(tmp_path, "runtime.executor=thread", "runtime.max_staleness=0"), tmp_path / "run", resume=True)
    try:
        assert again.step_num == 1 and again.step()["reward/mean"] >= 0
    finally:
        again.close()
