"""Trainer-level resume with the feedback samplers: checkpoint at step 1, restart, step 2 matches a straight run."""

import pytest
import torch

from covey.train.config import validate_config
from covey.train.trainer import Trainer


def _compare_keys(row):
    return {k: v for k, v in row.items() if not k.startswith(("time/", "throughput/", "reward/seconds", "memory/"))}


def _cfg(sampler: dict):
    return validate_config({
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 6, "n_test": 4}},
        "sampler": sampler,
        "rollout": {"prompts_per_step": 4, "group_size": 3},
        "sampling": {"max_new_tokens": 3},
        "algo": {"preset": "grpo", "kl": None},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "checkpoint": {"every": 1},
        "steps": 2,
    })  # fmt: skip


def _steps(cfg, run, n, resume=False):
    t = Trainer(cfg, run, resume=resume)
    try:
        return [t.step() for _ in range(n)], t.sampler.state_dict()
    finally:
        t.close()


@pytest.mark.parametrize("sampler", [
    {"name": "xrpo", "exemplar_pool": "dataset", "solution_key": "answer"},
    {"name": "gdro", "rollouts": "sqrt"},
    {"name": "drive", "stage1_steps": 1, "tau": 0.5},
    {"name": "masa", "cutoff_margin": 1.0},
    {"name": "self"},
    {"name": "self", "greedy_check": "proxy"},
    {"name": "d3s", "sample_keep_start": 0.5, "token_keep_start": 0.5, "anneal_steps": 2},
    {"name": "v0_provisional", "pool": 2},
], ids=lambda s: "-".join([s["name"]] + [s[k] for k in ("greedy_check",) if k in s]))  # fmt: skip
def test_resume_matches_a_straight_run(tmp_path, sampler):
    cfg = _cfg(sampler)
    straight, state = _steps(cfg, tmp_path / "a", 2)
    _steps(cfg, tmp_path / "b", 1)
    resumed, state_b = _steps(cfg, tmp_path / "b", 1, resume=True)
    assert _compare_keys(resumed[0]) == _compare_keys(straight[1])
    assert _same(state_b, state)


def _same(a, b) -> bool:
    """Bit-exact equality of nested state (tensors compared with torch.equal, NaN == NaN)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) \
            and torch.equal(a.isnan() if a.is_floating_point() else a, b.isnan() if b.is_floating_point() else b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
