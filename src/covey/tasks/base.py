"""The Task protocol: a source of prompt items plus the verifier that scores completions.

An item is a dict ``{"id": int, "prompt": str | list[{"role","content"}], "answer": ..., ...}``;
every key besides id and prompt reaches reward functions as a keyword column. The verifier has
the reward signature TRL users write: ``reward(prompts, completions, **columns) -> list[float | None]``.

What a task may add beyond the protocol is declared in `TaskHooks` (read once with `hooks_of(task)`,
so callers never probe a task's attributes): its verifier (a task without one takes its rewards from
`rewards:`), the answer maj@k votes on, a demonstration for `covey sft`, a cap on prompt tokens,
where its verifier comes from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

__all__ = ["Task", "TaskHooks", "hooks_of"]


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


@dataclass(frozen=True)
class TaskHooks:
    """The optional parts of a task (None: the task has none).

    reward:             reward(prompts, completions, **columns) -> list[float | None], the verifier
                        (column `accuracy`); a task without one needs `rewards:`.
    extract_answer:     extract_answer(completion) -> str | None, the final answer maj@k votes on (`covey eval`).
    demonstration:      demonstration(item) -> str, a target completion for `covey sft`.
    max_prompt_tokens:  the longest prompt the task allows, in tokens.
    reward_origin:      where the verifier comes from, for the start lines (None: "the verifier of task X").
    """

    reward: Callable[..., list] | None = None
    extract_answer: Callable[[str], Any] | None = None
    demonstration: Callable[[dict], str] | None = None
    max_prompt_tokens: int | None = None
    reward_origin: str | None = None


def hooks_of(task: Any) -> TaskHooks:
    """The `TaskHooks` a task object has (a built-in task, an import-path class or a user's object)."""
    return TaskHooks(**{f.name: getattr(task, f.name, None) for f in fields(TaskHooks)})
