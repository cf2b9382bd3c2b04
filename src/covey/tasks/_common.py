"""Helpers shared by the built-in tasks: prompt wrapping, split names, the final-answer verifier."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from covey.rewards.math import EXTRACTION_MODES, completion_text, extract_answer, math_equal

__all__ = ["SPLITS", "FinalAnswerTask", "as_prompt", "check_counts", "check_dataset_params", "check_split", "completion_text",
           "seeded_splits"]

SPLITS = ("train", "test")


def as_prompt(text: str, chat: bool) -> str | list[dict]:
    """The prompt as plain text, or as one user chat message (the rollout layer applies the template)."""
    return [{"role": "user", "content": text}] if chat else text


def check_split(task: str, split: str, allowed: tuple[str, ...] = SPLITS) -> None:
    if split not in allowed:
        raise ValueError(f"task {task!r} has no split {split!r}; allowed: {', '.join(allowed)}")


def check_counts(n_train: int, n_test: int) -> None:
    """The generated tasks' split sizes."""
    if n_train < 0 or n_test < 0:
        raise ValueError(f"n_train and n_test must be >= 0, got {n_train}, {n_test}")


def seeded_splits(key: str, seed: int, n_train: int, n_test: int,
                  draw: Callable[[int, random.Random], list[dict]]) -> dict[str, list[dict]]:  # fmt: skip
    """Each split's items, `draw(n, rng)` with the split's own generator (seeded by "covey-<key>-<split>-<seed>"),
    so one split's size never changes the other's items."""
    return {s: draw(n, random.Random(f"covey-{key}-{s}-{seed}")) for s, n in (("test", n_test), ("train", n_train))}


def check_dataset_params(template: str, placeholder: str, limit, order: Sequence[str]) -> None:
    """Validate the parameters the dataset-backed math tasks share (gsm8k, math500)."""
    if f"{{{placeholder}}}" not in template:
        raise ValueError(f"template must contain '{{{placeholder}}}', got {template!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")
    bad = [m for m in order if m not in EXTRACTION_MODES]
    if bad or not order:
        raise ValueError(f"order must list modes from {EXTRACTION_MODES}, got {list(order)}")


class FinalAnswerTask:
    """The verifier of tasks whose completion ends in one final answer, checked with `math_equal`.

    Subclasses set `order` (the `extract_answer` modes tried in turn). `extract_answer` is also what
    maj@k votes on (`covey eval`).
    """

    order: tuple[str, ...] = ("last_number",)

    def extract_answer(self, completion) -> str | None:
        """The final answer in one completion (str or chat messages), or None."""
        return extract_answer(completion_text(completion), order=list(self.order))

    def reward(self, prompts, completions, answer, **_) -> list[float | None]:
        if len(answer) != len(completions):
            raise ValueError(f"answer has {len(answer)} entries but there are {len(completions)} completions")
        return [1.0 if math_equal(self.extract_answer(c), gold) else 0.0 for c, gold in zip(completions, answer)]
