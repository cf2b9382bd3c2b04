"""A prompt longer than the model's context fails when the run starts (or is skipped, counted)."""

import logging

import pytest

from covey.api import GRPOTrainer

CFG = {"steps": 1, "rollout": {"prompts_per_step": 1, "group_size": 2}, "sampling": {"max_new_tokens": 24},
       "reward_workers": 0, "log": {"progress": False, "tensorboard": False}, "algo": {"preset": "grpo", "kl": None}}  # fmt: skip
ROWS = [{"prompt": "1 + 1 =", "answer": "2"}, {"prompt": "7 " * 1010, "answer": "7"}]  # tiny-llama: 1024 positions


def test_long_prompt_is_an_error_naming_the_item(tmp_path):
    with pytest.raises(ValueError, match=r"prompt of item 1 has \d+ tokens but at most 1000 fit"):
        GRPOTrainer(model="tiny-llama", train_dataset=ROWS, config=CFG, run_dir=tmp_path / "a")


def test_long_prompt_can_be_skipped_with_a_count(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        trainer = GRPOTrainer(model="tiny-llama", train_dataset=ROWS, config={**CFG, "task": {"on_long_prompt": "skip"}},
                              run_dir=tmp_path / "b")  # fmt: skip
    assert "skipped 1 of 2 prompts longer than 1000 tokens" in caplog.text
    assert [it["id"] for it in trainer.trainer.sampler.items] == [0]
    trainer.step()
    trainer.close()


def test_task_max_prompt_tokens_caps_the_context_limit(tmp_path):
    with pytest.raises(ValueError, match=r"prompt of item 1 has \d+ tokens but at most 12 fit \(the task's max_prompt_tokens\)"):
        GRPOTrainer(model="tiny-llama", train_dataset=ROWS[:1] + [{"prompt": "7 " * 20, "answer": "7"}], config=CFG,
                    run_dir=tmp_path / "c", max_prompt_tokens=12)  # fmt: skip
