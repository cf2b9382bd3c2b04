"""`group`: G i.i.d. completions per prompt through an Engine (the GRPO rollout), and the helpers
every strategy shares: chat templates in, `Rollouts` out, completions decoded back to text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.engine.base import Engine, SamplingParams
from covey.models import apply_chat
from covey.strategies.base import RolloutContext, register_strategy
from covey.rollouts import Rollouts

__all__ = ["GroupStrategy", "completion_texts", "item_columns", "sample_groups"]


def sample_groups(engine: Engine, tokenizer, items: list[dict], sizes: list[int] | int, sampling: SamplingParams) -> Rollouts:
    """`sizes[i]` completions for item i (an int: the same for all), one group per item.

    Rows are ordered item by item; `group` = position in `items`; unequal sizes are generated in one
    engine call per distinct size. `sampling.item_max_new_tokens` ({item id: limit}) becomes each
    call's `prompt_max_new_tokens`: those rows stop at their limit (finish reason "length").
    """
    sizes = [sizes] * len(items) if isinstance(sizes, int) else list(sizes)
    if len(sizes) != len(items):
        raise ValueError(f"got {len(sizes)} group sizes for {len(items)} items")
    if any(n < 1 for n in sizes):
        raise ValueError(f"every group size must be >= 1, got {sizes}")
    prompts = [apply_chat(tokenizer, item["prompt"]) for item in items]
    parts: dict[int, Rollouts] = {}
    for n in sorted(set(sizes)):
        idx = [i for i, s in enumerate(sizes) if s == n]
        limits = sampling.limits_for([int(items[i]["id"]) for i in idx]) if sampling.item_max_new_tokens else None
        call = dataclasses.replace(sampling, prompt_max_new_tokens=limits) if limits is not None else sampling
        gen = engine.generate([prompts[i] for i in idx], n, call)
        index = torch.tensor(idx, dtype=torch.long)[gen.prompt_index]
        parts[n] = Rollouts.from_generation(gen, group=index, items=[items[i] for i in index.tolist()])
    batch = parts[sizes[0]] if len(parts) == 1 else Rollouts.concat(list(parts.values()))
    if len(parts) > 1:
        batch = batch.select(torch.argsort(batch.group, stable=True))
    return batch


def completion_texts(tokenizer, batch) -> list[str]:
    """Decoded completions (padding and special tokens dropped)."""
    lengths = batch.lengths.tolist()
    return tokenizer.batch_decode(
        [row[:n].tolist() for row, n in zip(batch.completion_ids, lengths)], skip_special_tokens=True
    )


def item_columns(rows: list[dict]) -> dict[str, list]:
    """Reward-function keyword columns from the item of each row: every key but id and prompt."""
    keys = dict.fromkeys(k for r in rows for k in r if k not in ("id", "prompt"))
    return {k: [r.get(k) for r in rows] for k in keys}


@register_strategy("group")
class GroupStrategy:
    """GRPO's rollout: `group_sizes` i.i.d. completions per item in one sampling round."""

    engine_protocols = (Engine,)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        return sample_groups(ctx.engine, ctx.tokenizer, items, ctx.group_sizes(items), ctx.sampling(0)), {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
