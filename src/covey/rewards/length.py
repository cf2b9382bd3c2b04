"""Length rewards: a target-length reward (L1 / LCPO) and DAPO's soft overlong punishment.

Lengths come, in order of preference, from a ``completion_length`` column (ints), a
``completion_ids`` column (token id lists, as TRL passes them), or, with ``unit="chars"`` /
``"words"``, from the completion text. The overlong formula itself lives in
`covey.algos.shaping.overlong_penalty`; this module only exposes it as a reward column.
"""

from __future__ import annotations

import torch

from covey.algos.shaping import overlong_penalty
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["SoftOverlongPunishment", "TargetLengthReward", "completion_lengths"]

UNITS = ("tokens", "chars", "words")


def completion_lengths(completions, unit: str = "tokens", completion_length=None, completion_ids=None) -> list[int]:
    """Length of each completion in `unit` (tokens need a completion_length or completion_ids column).

    >>> completion_lengths(["a bc", "d"], unit="words"), completion_lengths(["x"], completion_ids=[[5, 6, 7]])
    ([2, 1], [3])
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if unit == "tokens":
        if completion_length is not None:
            return [int(x) for x in completion_length]
        if completion_ids is not None:
            return [len(ids) for ids in completion_ids]
        raise ValueError(
            "token lengths need a 'completion_length' or 'completion_ids' column; pass one to the reward "
            "runner, or use unit='chars' / 'words'"
        )
    texts = [completion_text(c) for c in completions]
    return [len(t) if unit == "chars" else len(t.split()) for t in texts]


@register_reward("length")
class TargetLengthReward:
    r"""Penalty for missing a target length: ``r = -alpha * |n_target - n|`` (0 at the target).

    From "L1: Controlling How Long A Reasoning Model Thinks With Reinforcement Learning"
    (arXiv 2503.04697), LCPO-Exact: ``r = 1[correct] - alpha * |n_gold - n_y|``, alpha = 0.0003.
    Here only the length term is computed; add the correctness reward as another column (the paper's
    sum is the runner's weighted sum with weights 1, 1). Departure: the paper puts the target in the
    prompt ("Think for N tokens"); here the target is `target` or the per-item ``target_length`` column,
    and the prompt is the task's business.

    >>> TargetLengthReward(target=10, alpha=0.5, unit="words")(prompts=None, completions=["a " * 10, "a " * 4])
    [0.0, -3.0]
    """

    def __init__(self, target: int | None = None, alpha: float = 0.0003, unit: str = "tokens"):
        if target is not None and target < 0:
            raise ValueError(f"TargetLengthReward: target must be >= 0 or None, got {target}")
        if alpha < 0:
            raise ValueError(f"TargetLengthReward: alpha must be >= 0, got {alpha}")
        if unit not in UNITS:
            raise ValueError(f"TargetLengthReward: unit must be one of {UNITS}, got {unit!r}")
        self.target, self.alpha, self.unit = target, alpha, unit

    def __call__(self, prompts, completions, target_length=None, completion_length=None, completion_ids=None, **_):
        lengths = completion_lengths(completions, self.unit, completion_length, completion_ids)
        if self.target is not None:
            targets = [self.target] * len(lengths)
        elif target_length is not None:
            targets = list(target_length)
        else:
            raise ValueError("TargetLengthReward needs `target` or a 'target_length' column")
        return [None if t is None else 0.0 - self.alpha * abs(int(t) - n) for t, n in zip(targets, lengths)]


@register_reward("overlong")
class SoftOverlongPunishment:
    """DAPO soft overlong punishment as a reward column (0 in budget, down to -penalty_factor).

    "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476), eq. 13;
    formula and edge cases in `covey.algos.shaping.overlong_penalty`. Give it weight 1 next to the
    correctness reward to get the paper's summed reward.

    >>> SoftOverlongPunishment(max_len=20, buffer_len=10)(prompts=None, completions=["", "", ""],
    ...                                                  completion_length=[10, 15, 20])
    [0.0, -0.5, -1.0]
    """

    def __init__(self, max_len: int, buffer_len: int, penalty_factor: float = 1.0, unit: str = "tokens"):
        overlong_penalty(torch.zeros(0), max_len, buffer_len, penalty_factor)  # validates the numbers
        self.max_len, self.buffer_len, self.penalty_factor, self.unit = max_len, buffer_len, penalty_factor, unit

    def __call__(self, prompts, completions, completion_length=None, completion_ids=None, **_) -> list[float]:
        lengths = completion_lengths(completions, self.unit, completion_length, completion_ids)
        pen = overlong_penalty(torch.tensor(lengths, dtype=torch.float32), self.max_len, self.buffer_len,
                               self.penalty_factor)
        return pen.tolist()
