"""Shared by the in-process trainer tests: the tiny run they start from (tiny-llama on one-digit
arithmetic, 4 prompts x 4 completions of at most 8 tokens, no KL, no tensorboard)."""

from covey.train.config import load_config

TINY = [
    "model.name=tiny-llama",
    "task.name=arithmetic",
    "task.params={digits: 1, n_train: 64, n_test: 16}",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "sampling.max_new_tokens=8",
    "reward_workers=0",
    "log.progress=false",
    "log.tensorboard=false",
    "algo.kl=null",
    "optim.lr=3e-3",
]


def tiny_config(tmp_path, *overrides):
    """The tiny run's config with its logs under `tmp_path`; later overrides win."""
    return load_config(None, [*TINY, f"log.dir={tmp_path}", *overrides])
