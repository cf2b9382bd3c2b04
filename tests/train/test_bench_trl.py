"""TRL's GRPOTrainer and covey's learner compute the same first-step loss, advantages and gradient.

Behaviour test (not timing): TRL 1.16 samples and scores one batch on tiny-llama in fp32; covey's
learner evaluates its loss on exactly those samples from the same initial weights.
"""

import pytest

pytest.importorskip("trl")

from covey.rewards.math import completion_text  # noqa: E402
from covey.train.bench_trl import covey_config, first_step_match, trl_args  # noqa: E402


def digit_fraction(prompts, completions, **_):
    """A dense reward (share of digit characters) so every group has non-zero advantages."""
    texts = [completion_text(c) for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def test_first_step_loss_advantages_and_gradient_match_trl():
    # EOS allowed (fixed_length=False): unequal lengths make the token-mean loss non-zero at ratio 1.
    r = first_step_match(
        "tiny-llama", prompts=4, group_size=4, new_tokens=16, reward=digit_fraction, fixed_length=False
    )
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

    from covey.train import bench_trl

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")

    monkeypatch.setattr(bench_trl, "first_step_match", oom)
    monkeypatch.setattr(trl.GRPOTrainer, "train", oom)
    monkeypatch.chdir(tmp_path)  # TRL's output_dir
    r = bench_trl.step_vs_trl("tiny-llama", steps=2, prompts=2, group_size=2, new_tokens=4, covey_fp32=False, threads=1)
    assert r["match_error"].startswith("TRL out of memory") and r["trl_error"].startswith("TRL out of memory at step 1")
    assert len(r["covey_steps_s"]) == 3 and r["covey_s_per_step"] > 0  # warm-up + 2 timed steps
    assert "ratio_trl_over_covey" not in r and "trl_s_per_step" not in r
