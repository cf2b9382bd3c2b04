"""Shared helpers for the sampler tests: hand-built scored batches, state round trips, one real step."""

from __future__ import annotations

import io

import torch

from covey.rollouts import Rollouts
from covey.samplers import apply_feedback
from covey.train.config import validate_config
from covey.train.trainer import Trainer


class FlagTask:
    """Items q0..q{n-1}; the verifier calls every completion of a flagged item correct, all others wrong,
    so a flagged prompt's greedy answer is correct whatever the model writes."""

    name, answer_format = "flags", "anything"

    def __init__(self, n: int, solved: set[int]):
        self.rows = [{"id": i, "prompt": f"q{i}", "solved": i in solved} for i in range(n)]

    def examples(self, split: str = "train"):
        return self.rows

    def reward(self, prompts, completions, solved, **_):
        return [1.0 if s else 0.0 for s in solved]


def items(n: int) -> list[dict]:
    return [{"id": 100 + i, "prompt": f"q{i}", "answer": str(i)} for i in range(n)]


def scored(prompt_ids, success, groups=None) -> Rollouts:
    """A scored batch: one row per entry; `success` goes in the `accuracy` column."""
    n = len(prompt_ids)
    groups = groups if groups is not None else prompt_ids
    return Rollouts(
        prompt_ids=[torch.tensor([1, 2]) for _ in range(n)],
        completion_ids=torch.ones(n, 3, dtype=torch.long),
        completion_mask=torch.ones(n, 3),
        behaviour_logprobs=torch.full((n, 3), -1.0),
        group=torch.tensor(groups, dtype=torch.long),
        prompt_id=torch.tensor(prompt_ids, dtype=torch.long),
        rewards=torch.tensor(success, dtype=torch.float32)[:, None],
        reward_names=("accuracy",),
    )


def observe(sampler, batch: Rollouts) -> dict[str, float]:
    """What the trainer does: `sampler.observe(batch)`, which must leave the batch's mask and rewards
    alone, then the gate (`apply_feedback`); returns the feedback's metrics."""
    mask, rewards = batch.completion_mask.clone(), batch.rewards.clone()
    feedback = sampler.observe(batch)
    assert torch.equal(batch.completion_mask, mask) and torch.equal(batch.rewards, rewards), "observe edited the batch"
    apply_feedback(batch, feedback)
    return feedback.metrics


def ids(draws) -> list[int]:
    """The item ids of a sampler's draws."""
    return [int(d.item["id"]) for d in draws]


def same_state(a, b) -> bool:
    """Equal nested state: dicts/lists recursively, tensors bit-exactly (dtype and shape included)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b


def reload(sampler, factory):
    """state_dict -> torch.save -> torch.load -> a fresh sampler from `factory()`."""
    buf = io.BytesIO()
    torch.save(sampler.state_dict(), buf)
    buf.seek(0)
    fresh = factory()
    fresh.load_state_dict(torch.load(buf, weights_only=False))
    return fresh


def one_step(tmp_path, sampler: dict | None = None, **over):
    """One training step on tiny-llama with the given sampler (and config overrides); returns metrics."""
    raw = {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 32, "n_test": 8}},
        "rollout": {"prompts_per_step": 4, "group_size": 2},
        "sampling": {"max_new_tokens": 4},
        "algo": {"preset": "grpo", "kl": None},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "steps": 1,
    }
    if sampler is not None:
        raw["sampler"] = sampler
    for k, v in over.items():
        raw[k] = {**raw.get(k, {}), **v} if isinstance(v, dict) and isinstance(raw.get(k), dict) else v
    trainer = Trainer(validate_config(raw), tmp_path / "run")
    try:
        return trainer.step()
    finally:
        trainer.close()
