"""`group`: G i.i.d. completions per prompt through an Engine (the GRPO rollout), and the helpers
every strategy shares: chat templates in, `Rollouts` out, completions decoded back to text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.engine.base import Engine, SamplingParams
from covey.models import apply_chat
from covey.samplers.base import Draw
from covey.strategies.base import RolloutContext, register_strategy
from covey.rollouts import Rollouts, item_columns

__all__ = ["GroupStrategy", "completion_texts", "item_columns", "sample_groups"]


def sample_groups(engine: Engine, tokenizer, draws: list[Draw], sampling: SamplingParams) -> Rollouts:
    """`d.n` completions for each draw's item, one group per draw.

    Rows are ordered draw by draw; `group` = position in `draws`; unequal sizes are generated in one
    engine call per distinct size. A draw's `max_new_tokens` (capped at `sampling.max_new_tokens`)
    becomes its prompt's `prompt_max_new_tokens`: its rows stop there (finish reason "length").
    """
    if not draws:
        raise ValueError("sample_groups needs at least one draw")
    items, sizes = [d.item for d in draws], [d.n for d in draws]
    prompts = [apply_chat(tokenizer, item["prompt"]) for item in items]
    parts: dict[int, Rollouts] = {}
    for n in sorted(set(sizes)):
        idx = [i for i, s in enumerate(sizes) if s == n]
        caps = [draws[i].max_new_tokens for i in idx]
        limits = tuple(min(c or sampling.max_new_tokens, sampling.max_new_tokens) for c in caps) if any(caps) else None
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


@register_strategy("group")
class GroupStrategy:
    """GRPO's rollout: each draw's `n` i.i.d. completions in one sampling round."""

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        return sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0)), {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
