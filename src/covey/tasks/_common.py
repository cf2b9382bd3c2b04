"""Helpers shared by the built-in tasks: prompt wrapping, split names, completion text."""

from __future__ import annotations

from covey.rewards.math import completion_text

__all__ = ["SPLITS", "as_prompt", "check_split", "completion_text"]

SPLITS = ("train", "test")


def as_prompt(text: str, chat: bool) -> str | list[dict]:
    """The prompt as plain text, or as one user chat message (the rollout layer applies the template)."""
    return [{"role": "user", "content": text}] if chat else text


def check_split(task: str, split: str, allowed: tuple[str, ...] = SPLITS) -> None:
    if split not in allowed:
        raise ValueError(f"task {task!r} has no split {split!r}; allowed: {', '.join(allowed)}")
