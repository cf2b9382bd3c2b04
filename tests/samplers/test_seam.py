"""The sampler seam: the trainer calls every `BaseSampler` hook, in order, and is the one that
applies a sampler's `Feedback` (masks, zeroed rewards); `Draw` and `Feedback` are checked."""

import pytest
import torch

from covey.samplers import BaseSampler, Draw, Feedback, apply_feedback
from covey.samplers._sampling import first_tokens, kept_mask
from covey.train.config import validate_config
from covey.train.trainer import Trainer
from tests.samplers._helpers import scored


class Recorder(BaseSampler):
    """Overrides every hook and records the calls; its feedback drops row 1, the last token of every
    row and zeroes row 0's rewards (module-level so the trainer can build it by import path)."""

    requires = ("entropies",)

    def __init__(self, items, seed, *, skip_all: bool = False, feedback: str = "masks"):
        super().__init__(items, seed)
        self.calls, self.skip_all, self.feedback, self.pos = [], skip_all, feedback, 0
        self.seen: dict[str, torch.Tensor] = {}

    def next(self, k, group_size):
        self.calls.append(("next", k, group_size))
        out = [Draw(self.items[(self.pos + i) % len(self.items)], group_size) for i in range(k)]
        self.pos += k
        return out

    def before_rollout(self, draws, ctx):
        self.calls.append(("before_rollout", len(draws), len(ctx.draws)))
        return ([] if self.skip_all else draws), {"sampler/rec/before": 1.0}

    def observe(self, batch):
        self.calls.append(("observe", len(batch), batch.entropies is not None))
        self.seen["observed_mask"] = batch.completion_mask.clone()
        self.seen["observed_rewards"] = batch.rewards.clone()
        if self.feedback == "dict":
            return {"sampler/rec/observed": 1.0}  # the old contract: refused
        if self.feedback == "bad_shape":
            return Feedback(keep_rows=torch.ones(len(batch) + 1, dtype=torch.bool))
        n, t = batch.completion_mask.shape
        keep_rows = torch.ones(n, dtype=torch.bool)
        keep_rows[1] = False
        keep_tokens = first_tokens(torch.full((n,), t - 1), t)
        zero = torch.zeros(n, dtype=torch.bool)
        zero[0] = True
        return Feedback({"sampler/rec/observed": 1.0}, keep_rows=keep_rows, keep_tokens=keep_tokens, zero_rewards=zero)

    def after_update(self, batch, policy_logprobs):
        self.calls.append(("after_update", len(batch)))
        self.seen["trained_mask"] = batch.completion_mask.clone()
        self.seen["trained_rewards"] = batch.rewards.clone()
        return {"sampler/rec/after": 1.0}

    def state_dict(self):
        self.calls.append(("state_dict",))
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def _trainer(tmp_path, name="run", **sampler):
    raw = {
        "model": {"name": "tiny-llama"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 8, "n_test": 2}},
        "sampler": {"name": "tests.samplers.test_seam:Recorder", **sampler},
        "rollout": {"prompts_per_step": 2, "group_size": 3},
        "sampling": {"max_new_tokens": 4, "ignore_eos": True},
        "algo": {"preset": "grpo", "kl": None},
        "reward_workers": 0, "log": {"progress": False, "report_to": ["jsonl"]},
        "checkpoint": {"every": 1}, "steps": 2,
    }  # fmt: skip
    return Trainer(validate_config(raw), tmp_path / name)


def test_the_trainer_calls_every_hook_in_order_and_applies_the_feedback_itself(tmp_path):
    trainer = _trainer(tmp_path)
    try:
        m1, m2 = trainer.step(), trainer.step()
        # the step's start state (kept to rewind an interrupted step), the hooks, the checkpoint (every: 1)
        step = [("state_dict",), ("next", 2, 3), ("before_rollout", 2, 2), ("observe", 6, True), ("after_update", 6),
                ("state_dict",)]  # fmt: skip
        assert trainer.sampler.calls == step + step
        for m in (m1, m2):
            assert m["sampler/rec/before"] == m["sampler/rec/observed"] == m["sampler/rec/after"] == 1.0
        seen = trainer.sampler.seen
        # observe saw the batch as generated (4 tokens per row, rewards as scored) ...
        assert seen["observed_mask"].tolist() == [[1.0] * 4] * 6
        # ... and the learner trained on it after the trainer applied the feedback
        assert seen["trained_mask"].tolist() == [[1.0, 1, 1, 0], [0, 0, 0, 0]] + [[1.0, 1, 1, 0]] * 4
        assert seen["trained_rewards"][0].abs().sum() == 0
        assert torch.equal(seen["trained_rewards"][1:], seen["observed_rewards"][1:])
    finally:
        trainer.close()


def test_no_draws_left_skips_the_step_after_before_rollout(tmp_path):
    trainer = _trainer(tmp_path, skip_all=True)
    try:
        m = trainer.step()
        assert trainer.sampler.calls == [("state_dict",), ("next", 2, 3), ("before_rollout", 2, 2), ("state_dict",)]
        assert m["train/skipped_step"] == 1.0 and m["sampler/rec/before"] == 1.0
    finally:
        trainer.close()


@pytest.mark.parametrize("feedback, error, message", [
    ("dict", TypeError, "observe\\(\\) must return covey.samplers.Feedback, got dict"),
    ("bad_shape", ValueError, r"keep_rows must be a bool tensor of shape \(6,\) for this batch, got torch.bool \(7,\)"),
])  # fmt: skip
def test_feedback_of_the_wrong_kind_is_a_clear_error(tmp_path, feedback, error, message):
    trainer = _trainer(tmp_path, feedback=feedback)
    try:
        with pytest.raises(error, match=message):
            trainer.step()
    finally:
        trainer.close()


def test_apply_feedback_by_hand():
    b = scored([1, 1, 2], [1, 1, 0])
    b.completion_mask = torch.tensor([[1.0, 1, 0], [1, 1, 1], [1, 0, 0]])
    keep_rows = torch.tensor([True, False, True])
    keep_tokens = torch.tensor([[True, False, True], [True, True, True], [True, True, True]])
    assert kept_mask(b.completion_mask, keep_rows).tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    apply_feedback(b, Feedback(keep_rows=keep_rows, keep_tokens=keep_tokens, zero_rewards=torch.tensor([False, True, False])))
    assert b.completion_mask.tolist() == [[1, 0, 0], [0, 0, 0], [1, 0, 0]]
    assert b.rewards[:, 0].tolist() == [1.0, 0.0, 0.0]
    before = b.completion_mask.clone()
    apply_feedback(b, Feedback({"x": 1.0}))  # metrics only: the batch is unchanged
    assert torch.equal(b.completion_mask, before)
    assert first_tokens(torch.tensor([0, 2, 5]), 3).tolist() == [[False] * 3, [True, True, False], [True] * 3]
    with pytest.raises(ValueError, match=r"keep_tokens must be a bool tensor of shape \(3, 3\)"):
        apply_feedback(b, Feedback(keep_tokens=torch.ones(3, 3)))  # float, not bool


def test_draws_are_checked():
    item = {"id": 4, "prompt": "q"}
    assert Draw(item, 2) == Draw(item, 2, None) and Draw(item, 1, 7).max_new_tokens == 7
    for n in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n = .* must be an int >= 1"):
            Draw(item, n)
    for cap in (0, 1.5, False):
        with pytest.raises(ValueError, match="max_new_tokens = .* must be None or an int >= 1"):
            Draw(item, 1, cap)
    with pytest.raises(ValueError, match="Draw.item must be a dataset item"):
        Draw("q", 1)


class ItemsNotDraws(Recorder):
    def next(self, k, group_size):
        return self.items[:k]  # the old contract (items, no group sizes): refused


def test_a_sampler_that_returns_items_instead_of_draws_is_a_clear_error(tmp_path):
    trainer = _trainer(tmp_path, name="items")
    trainer.sampler = ItemsNotDraws(trainer.sampler.items, 0)
    try:
        with pytest.raises(TypeError, match="ItemsNotDraws: next\\(\\) and before_rollout\\(\\) must return a list of covey.samplers.Draw, got dict"):
            trainer.step()
    finally:
        trainer.close()


def test_the_own_sampler_example_trains_with_its_unequal_groups(tmp_path):
    from covey.train.config import load_config

    cfg = load_config("examples/own_sampler/train.yaml", ["task.params={digits: 1, n_train: 4, n_test: 2}", "reward_workers=0",
                                                          "log.progress=false", "log.report_to=[jsonl]"])  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "own")
    try:
        m = trainer.step()  # 4 prompts, 4 per step: the next step revisits all of them
        failed = set(trainer.sampler.failed)
        assert m["sampler/hard_first/failed"] == len(failed)
        batch, _ = trainer.collect()
        counts = torch.bincount(batch.prompt_id).tolist()
        assert {pid: counts[pid] for pid in set(batch.prompt_id.tolist())} == {pid: 2 + 2 * (pid in failed) for pid in range(4)}
    finally:
        trainer.close()
