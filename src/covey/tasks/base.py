"""The Task protocol: a source of prompt items plus the verifier that scores completions.

An item is a dict ``{"id": int, "prompt": str | list[{"role","content"}], "answer": ..., ...}``;
every key besides id and prompt reaches reward functions as a keyword column. The verifier has
the reward signature TRL users write: ``reward(prompts, completions, **columns) -> list[float | None]``.

Optional hooks a task may add (callers check with getattr):
    extract_answer(completion) -> str | None   the final answer maj@k votes on (`covey eval`)
    demonstration(item) -> str                 a target completion for `covey sft`
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Task"]


@runtime_checkable
class Task(Protocol):
    name: str
    answer_format: str  # one sentence a user can read: what the completion must contain

    def examples(self, split: str = "train") -> Sequence[dict]:
        """The items of a split ("train" or "test"), in a fixed order."""
        ...

    def reward(self, prompts: list, completions: list[str], **columns) -> list[float | None]:
        """1.0 for a correct completion, 0.0 otherwise (None = could not be scored)."""
        ...
