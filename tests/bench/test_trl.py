"""TRL's GRPOTrainer and covey's learner compute the same first-step loss, advantages and gradient.

Behaviour test (not timing): TRL 1.16 samples and scores one batch on tiny-llama in fp32; covey's
learner evaluates its loss on exactly those samples from the same initial weights.
"""

import pytest

pytest.importorskip("trl")

from covey.rewards.math import completion_text  # noqa: E402
from covey.bench.trl import covey_config, first_step_match, trl_args  # noqa: E402


def digit_fraction(prompts, completions, **_):
    """A dense reward (share of digit characters) so every group has non-zero advantages."""
    texts = [completion_text(c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def test_first_step_loss_advantages_and_gradient_match_trl(monkeypatch):
    # The loss sees only micro-batches the learner moved to its device itself (on CUDA a batch left on
    # the CPU crashed in the surrogate: logp on cuda:0, old_logp on cpu). On the CPU the devices agree
    # anyway, so check the path: every batch `_loss` gets came out of `Learner._micro`.
    from covey.learner.learner import Learner

    moved: list = []
    micro, loss = Learner._micro, Learner._loss

    def spy_micro(self, *a, **k):
        out = micro(self, *a, **k)
        moved.append(out[0])
        return out

    def spy_loss(self, batch, *a, **k):
        assert any(batch is m for m in moved), "the loss got a batch that did not go through Learner._micro"
        return loss(self, batch, *a, **k)

    monkeypatch.setattr(Learner, "_micro", spy_micro)
    monkeypatch.setattr(Learner, "_loss", spy_loss)
    # EOS allowed (fixed_length=False): unequal lengths make the token-mean loss non-zero at ratio 1.
    r = first_step_match(
        "tiny-llama", prompts=4, group_size=4, new_tokens=16, reward=digit_fraction, fixed_length=False
    )
    assert len(moved) == 1
    assert r["advantages_nonzero"] > 0 and r["grad_norm_trl"] > 0  # the comparison is not vacuous
    assert r["loss_abs_diff"] < 1e-5
    assert r["advantages_max_abs_diff"] < 1e-5
    assert r["grad_max_abs_diff_rel"] < 1e-5
    assert r["grad_l2_diff_rel"] < 1e-5


def test_configs_describe_the_same_algorithm():
    cfg = covey_config("tiny-llama", prompts=8, group_size=8, new_tokens=24)
    args = trl_args(prompts=8, group_size=8, new_tokens=24, bf16=False, steps=1)
    assert (cfg.algo.aggregation.name, args.loss_type) == ("token-mean", "dapo")
    assert cfg.algo.kl is None and args.beta == 0.0
    assert cfg.algo.advantage.params == {"eps": 1e-4, "scale": "group"} and args.scale_rewards == "group"
    assert cfg.algo.surrogate.params["eps_low"] == args.epsilon == cfg.algo.surrogate.params["eps_high"]
    assert cfg.optim.lr == args.learning_rate and cfg.optim.grad_clip == args.max_grad_norm
    assert (cfg.optim.epochs, cfg.optim.mini_batches, args.num_iterations, args.steps_per_generation) == (1, 1, 1, 1)
    assert cfg.rollout.prompts_per_step * cfg.rollout.group_size == args.per_device_train_batch_size
    assert cfg.sampling.ignore_eos and args.generation_kwargs == {"min_new_tokens": args.max_completion_length}
    assert cfg.sampling.max_new_tokens == args.max_completion_length == 24


def test_step_vs_trl_times_covey_alone_when_trl_runs_out_of_memory(monkeypatch, tmp_path):
    """On a GPU TRL can run out of memory where covey fits (32 x 8 x 256 on one H100): the bench
    records TRL's failure and still times covey's steps, instead of losing the run."""
    import torch
    import trl

    from covey.bench import trl as bench_trl

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")

    monkeypatch.setattr(bench_trl, "first_step_match", oom)
    monkeypatch.setattr(trl.GRPOTrainer, "train", oom)
    monkeypatch.chdir(tmp_path)  # TRL's output_dir
    r = bench_trl.step_vs_trl("tiny-llama", steps=2, prompts=2, group_size=2, new_tokens=4, dtypes=("bf16",), threads=1)
    assert r["match_error"].startswith("TRL out of memory") and r["trl_error"].startswith("TRL out of memory at step 1")
    assert len(r["covey_steps_s"]) == 3 and r["covey_s_per_step"] > 0  # warm-up + 2 timed steps
    assert "ratio_trl_over_covey" not in r and "trl_s_per_step" not in r


def test_a_trl_crash_is_recorded_but_a_covey_failure_is_raised(monkeypatch, tmp_path):
    """TRL's bf16 sampling has crashed on random weights (NaN probabilities): the bench records it and
    times covey alone. A failure of covey's own step inside TRL's callback is not TRL's: it is raised."""
    import trl

    from covey.bench import trl as bench_trl
    from covey.train.trainer import Trainer

    def nan_crash(*a, **k):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")

    monkeypatch.setattr(bench_trl, "first_step_match", lambda *a, **k: {})
    monkeypatch.chdir(tmp_path)
    small = dict(steps=1, prompts=2, group_size=2, new_tokens=4, threads=1, dtypes=("bf16",))
    with monkeypatch.context() as m:
        m.setattr(trl.GRPOTrainer, "train", nan_crash)
        r = bench_trl.step_vs_trl("tiny-llama", **small)
    assert r["trl_error"] == "TRL failed (RuntimeError) at step 1: probability tensor contains either `inf`, `nan` or element < 0"
    assert len(r["covey_steps_s"]) == 2 and "ratio_best" not in r

    def broken(self):
        raise ValueError("covey's own bug")

    monkeypatch.setattr(Trainer, "step", broken)
    with pytest.raises(ValueError, match="covey's own bug"):
        bench_trl.step_vs_trl("tiny-llama", **small)


@pytest.mark.parametrize("dtypes", ["bf16,bf16", "fp16", ""])
def test_step_vs_trl_refuses_bad_dtypes_before_loading_anything(dtypes):
    from typer.testing import CliRunner

    from covey.cli import app

    r = CliRunner().invoke(app, ["bench", "step-vs-trl", "--dtypes", dtypes, "--device", "cpu"])
    assert r.exit_code == 2 and "--dtypes takes distinct entries of bf16, fp32" in r.output


def test_step_vs_trl_pairs_each_dtype_and_compares_the_faster_of_each(monkeypatch):
    """The headline ratio takes each framework at its faster dtype; each pair keeps its own ratio."""
    from covey.bench import trl as bench_trl

    fake = {"bf16": (2.0, 0.8), "fp32": (1.5, 0.5)}  # dtype -> (TRL s/step, covey s/step)

    def pair(model, dtype, shape, steps, dev):
        t, c = fake[dtype]
        return {"trl_s_per_step": t, "covey_s_per_step": c, "ratio": t / c}

    monkeypatch.setattr(bench_trl, "first_step_match", lambda *a, **k: {"loss_abs_diff": 0.0})
    monkeypatch.setattr(bench_trl, "_timed_pair", pair)
    r = bench_trl.step_vs_trl("tiny-llama", steps=1, threads=1)
    assert r["ratio_bf16"] == r["ratio_trl_over_covey"] == 2.5 and r["ratio_fp32"] == 3.0
    assert r["trl_s_per_step"] == 2.0 and r["covey_fp32_s_per_step"] == 0.5
    assert r["ratio_best"] == 3.0 and r["best_dtypes"] == {"trl": "fp32", "covey": "fp32"}
    fake["bf16"] = (1.0, 0.8)  # TRL faster in bf16, covey in fp32: best vs best crosses dtypes
    r = bench_trl.step_vs_trl("tiny-llama", steps=1, threads=1, dtypes=("fp32", "bf16"))
    assert r["ratio_best"] == 2.0 and r["best_dtypes"] == {"trl": "bf16", "covey": "fp32"}
    with pytest.raises(ValueError, match="distinct entries"):
        bench_trl.step_vs_trl("tiny-llama", dtypes=("fp16",))
