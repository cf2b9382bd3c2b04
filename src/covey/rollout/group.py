"""Group sampling: G i.i.d. completions per prompt through an Engine (the GRPO rollout).

This layer owns what the engine does not: chat templates (text/messages -> token ids), dataset ids,
and decoding completions back to text for the reward functions.
"""

from __future__ import annotations

import torch

from covey.engine.base import Engine, SamplingParams
from covey.models import apply_chat
from covey.rollouts import Rollouts

__all__ = ["completion_texts", "item_columns", "rollout_groups"]


def rollout_groups(engine: Engine, tokenizer, items: list[dict], group_size: int, sampling: SamplingParams) -> Rollouts:
    """Sample `group_size` completions for each item; `group` = position in `items`, `prompt_id` = item id."""
    prompts = [apply_chat(tokenizer, item["prompt"]) for item in items]
    batch = engine.generate(prompts, group_size, sampling)
    ids = torch.tensor([int(item["id"]) for item in items], dtype=torch.long)
    batch.prompt_id = ids.repeat_interleave(group_size)
    return batch


def completion_texts(tokenizer, batch: Rollouts) -> list[str]:
    """Decoded completions (padding and special tokens dropped)."""
    lengths = batch.lengths.tolist()
    return tokenizer.batch_decode(
        [row[:n].tolist() for row, n in zip(batch.completion_ids, lengths)], skip_special_tokens=True
    )


def item_columns(rows: list[dict]) -> dict[str, list]:
    """Reward-function keyword columns from the item of each row: every key but id and prompt."""
    return {k: [r.get(k) for r in rows] for k in rows[0] if k not in ("id", "prompt")}
