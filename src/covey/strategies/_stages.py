"""Shared by the two-stage strategies (`igrpo`, `cog_rethinker`): prompts that carry earlier answers."""

from __future__ import annotations

import torch

from covey.rollouts import Rollouts

__all__ = ["follow_up", "regroup", "texts_of"]


def follow_up(prompt, answers: list[str], instruction: str):
    """The prompt extended with earlier `answers` and an `instruction`: chat prompts get one assistant
    turn per answer and a user turn; plain-text prompts get the text appended."""
    if isinstance(prompt, str):
        shown = "".join(f"\n{a}\n" for a in answers)
        return f"{prompt}{shown}\n{instruction}\n"
    if not isinstance(prompt, (list, tuple)):
        raise ValueError(f"item prompt must be a str or a list of chat messages, got {type(prompt).__name__}")
    turns = [{"role": "assistant", "content": a} for a in answers]
    return list(prompt) + turns + [{"role": "user", "content": instruction}]


def regroup(batch: Rollouts, originals: list[dict], offset: int) -> Rollouts:
    """Rows keep the ORIGINAL item (rewards read its prompt and columns) while their `prompt_ids` are
    the follow-up prompt's; group ids are shifted by `offset` (unique across stages)."""
    by_id = {int(it["id"]): it for it in originals}
    batch.items = [by_id[int(p)] for p in batch.prompt_id.tolist()]
    batch.group = batch.group + offset
    return batch


def texts_of(tokenizer, batch: Rollouts, rows: torch.Tensor) -> list[str]:
    """Decoded completions of `rows` (indices)."""
    lengths = batch.lengths
    return tokenizer.batch_decode([batch.completion_ids[i, : lengths[i]].tolist() for i in rows.tolist()], skip_special_tokens=True)
