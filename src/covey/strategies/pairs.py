"""Rollouts for the preference mode (docs/preference.md).

`offline_pairs`: preference pairs from a dataset (TRL's preference format), no generation.

Each item holds a prompt and two completions, ``{"prompt": ..., "chosen": ..., "rejected": ...}``
(strings, or TRL's conversational form: a list of messages whose last one is the assistant's
answer). An item becomes a group of two rows, chosen then rejected; their items carry the column
``preferred`` (True / False), which the `preference_label` reward scores 1 / 0, so the `best_worst`
pair builder pairs them (docs/preference.md). Completions
are tokenized as the text followed by the tokenizer's EOS, the way `covey sft` trains them; rows
longer than `sampling.max_new_tokens` are cut there (finish reason "length", counted).
"""

from __future__ import annotations

from typing import Any

import torch

from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.strategies._rows import given_rows_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.strategies.group import sample_groups
from covey.samplers.base import Draw

__all__ = ["OfflinePairs", "ReferencePairs", "completion_text"]


def completion_text(value, column: str) -> str:
    """A completion given as a string or as TRL's message list (the last message's content)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        return str(value[-1]["content"])
    raise ValueError(f"offline_pairs: column {column!r} must be a string or a list of messages, got {type(value).__name__}")


@register_strategy("offline_pairs")
class OfflinePairs:
    """Dataset pairs as two-row groups (chosen, rejected); the engine is not called."""

    caps = StrategyCaps(labelled_reward="preference_label", makes_pairs=True)  # the dataset labels the pairs

    def __init__(self, chosen_key: str = "chosen", rejected_key: str = "rejected"):
        self.chosen_key, self.rejected_key = chosen_key, rejected_key

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        limit = ctx.sampling(0).max_new_tokens
        eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
        prompts, rows, finish, row_items, group = [], [], [], [], []
        for g, item in enumerate(items):
            for key, label in ((self.chosen_key, True), (self.rejected_key, False)):
                if key not in item:
                    raise ValueError(f"offline_pairs: item {item.get('id')} has no {key!r} column")
                ids = list(tok.encode(completion_text(item[key], key), add_special_tokens=False)) + eos
                finish.append("length" if len(ids) > limit else "stop")
                rows.append(ids[:limit])
                prompts.append(torch.tensor(apply_chat(tok, item["prompt"]), dtype=torch.long))
                row_items.append({**item, "preferred": label})
                group.append(g)
        batch = given_rows_batch(prompts, rows, finish, group, row_items)
        return batch, {"pref/truncated_frac": finish.count("length") / len(finish)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@register_strategy("reference_pairs")
class ReferencePairs:
    """XPO's rollout: policy samples plus samples of the frozen reference, in one group per prompt."""

    caps = StrategyCaps(needs_reference_engine=True, makes_pairs=True)

    def __init__(self, reference_n: int = 1):
        if type(reference_n) is not int or reference_n < 1:
            raise ValueError(f"reference_pairs: reference_n must be an integer >= 1, got {reference_n!r}")
        self.reference_n = reference_n

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        if ctx.reference_engine is None:
            raise ValueError("reference_pairs needs ctx.reference_engine (the trainer builds one for this strategy)")
        policy = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0))
        draws = [Draw(d.item, self.reference_n, d.max_new_tokens) for d in ctx.draws]
        ref = sample_groups(ctx.reference_engine, ctx.tokenizer, draws, ctx.sampling(1))
        ref.items = [{**it, "reference_sample": True} for it in ref.items]
        batch = Rollouts.concat([policy, ref])
        batch = batch.select(torch.argsort(batch.group, stable=True))  # a group's policy rows, then its reference rows
        return batch, {"pref/reference_rows_frac": len(ref) / len(batch)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
