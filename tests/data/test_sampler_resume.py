"""A stateful sampler survives kill -9 + resume bit-exactly (same metrics, same weights, same state)."""

import pytest
import torch

from tests._kill_resume import kill_and_resume


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
    a, wa, wb = kill_and_resume(tmp_path, cfg)
    assert any(k.startswith("sampler/vade/") for k in a[-1])
    for key, val in wa["sampler"].items():
        assert torch.equal(val, wb["sampler"][key]) if isinstance(val, torch.Tensor) else val == wb["sampler"][key], key
