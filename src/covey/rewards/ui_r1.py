"""UI-R1's GUI action rewards ("UI-R1: Enhancing Efficient Action Prediction of GUI Agents by Reinforcement
Learning", arXiv 2503.21620), checked against the authors' code, lll6gg/UI-R1 2fe9bf00c8aa
`src/ui_r1/src/open_r1/grpo_json_action_coord.py` (`extract_action`, `extract_coord`, `extract_bbox`,
`accuracy_reward_action`, `accuracy_reward_coord`, `format_reward`).

The completion answers ``<think>…</think> <answer>[{'action': 'click', 'coordinate': [x, y]}]</answer>``;
the row's `solution` column holds the gold the same way, a click with its target box
``<answer>[{'action': 'click' ,'coordinate': [x1, y1, x2, y2] }]</answer>`` (UI-R1's data builder). UI-R1
trains with three rewards summed: the action type (`ui_r1_action`), the click inside the box
(`ui_r1_coord`) and the format, which is covey's `format` reward with UI-R1's regex:

    {name: format, params: {pattern: "<think>.*?</think>\\s*<answer>.*?</answer>"}}

(UI-R1 full-matches the raw completion; covey's `format` strips its surrounding whitespace first.)
Quirks kept from the code: a click answer without a two-number coordinate counts as the point (0, 0); a
non-click action that matches the gold earns the coordinate reward too; coordinates are integers.
`scales` (UI-R1's trainer: original size / the processor's resized size, per axis) multiplies the
predicted point before the box test; without a `scales` column it is (1, 1).
"""

from __future__ import annotations

import re

from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["extract_action", "extract_bbox", "extract_coord", "ui_r1_action", "ui_r1_coord"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ACTION = (re.compile(r"'action':\s*'(\w+)'"), re.compile(r"'action':\s*(\w+)"))
_COORD = re.compile(r"\[(\d+),\s*(\d+)]")
_BBOX = re.compile(r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]")


def _answer(text: str) -> str | None:
    m = _ANSWER.search(text)
    return m.group(1).strip() if m else None


def extract_action(text: str) -> str | None:
    """The action of the first <answer> block ('action': 'click' or 'action': click), or None.

    >>> extract_action("<think>x</think><answer>[{'action': 'scroll', 'coordinate': [0, 0]}]</answer>")
    'scroll'
    >>> extract_action("[{'action': 'click'}]") is None  # no answer block
    True
    """
    answer = _answer(text)
    if answer is None:
        return None
    for pattern in _ACTION:
        m = pattern.search(answer)
        if m:
            return m.group(1)
    return None


def extract_coord(text: str) -> tuple[list[int], bool]:
    """([x, y], found) from the first "[x, y]" in the answer; ([0, 0], False) when there is none.

    >>> extract_coord("<answer>[{'action': 'click', 'coordinate': [12, 34]}]</answer>")
    ([12, 34], True)
    """
    answer = _answer(text)
    m = _COORD.search(answer) if answer is not None else None
    return ([int(m.group(1)), int(m.group(2))], True) if m else ([0, 0], False)


def extract_bbox(text: str) -> tuple[list[int], bool]:
    """([x1, y1, x2, y2], found) from the first four-number list in the answer; ([0, 0, 0, 0], False) otherwise."""
    answer = _answer(text)
    m = _BBOX.search(answer) if answer is not None else None
    return ([int(g) for g in m.groups()], True) if m else ([0, 0, 0, 0], False)


def _scales(scales, n: int) -> list:
    if scales is None:
        return [(1.0, 1.0)] * n
    if len(scales) != n:
        raise ValueError(f"column scales has {len(scales)} entries but there are {n} completions")
    return scales


@register_reward("ui_r1_action", paper="UI-R1 (action reward)", arxiv="2503.21620")
def ui_r1_action(prompts, completions, solution, **_) -> list[float]:
    """1.0 when the answer's action equals the gold `solution`'s (both found), else 0.0 (UI-R1's
    `accuracy_reward_action`).

    >>> gold = "<answer>[{'action': 'click' ,'coordinate': [10, 10, 20, 20] }]</answer>"
    >>> ui_r1_action(None, ["<answer>[{'action': 'click', 'coordinate': [0, 0]}]</answer>", "click"], [gold, gold])
    [1.0, 0.0]
    """
    if len(solution) != len(completions):
        raise ValueError(f"column solution has {len(solution)} entries but there are {len(completions)} completions")
    out = []
    for c, sol in zip(completions, solution):
        mine, gold = extract_action(completion_text(c)), extract_action(str(sol))
        out.append(1.0 if mine and gold and mine == gold else 0.0)
    return out


@register_reward("ui_r1_coord", paper="UI-R1 (coordinate reward)", arxiv="2503.21620")
def ui_r1_coord(prompts, completions, solution, scales=None, **_) -> list[float]:
    """UI-R1's `accuracy_reward_coord`: 0.0 unless the action matches the gold; a matching non-click action
    scores 1.0; a click scores 1.0 when its point (x * scale_x, y * scale_y, truncated to int) is inside the
    gold box, edges included.

    >>> gold = "<answer>[{'action': 'click' ,'coordinate': [10, 10, 20, 20] }]</answer>"
    >>> ui_r1_coord(None, ["<answer>[{'action': 'click', 'coordinate': [15, 20]}]</answer>",
    ...                    "<answer>[{'action': 'click', 'coordinate': [21, 15]}]</answer>"], [gold, gold])
    [1.0, 0.0]
    >>> ui_r1_coord(None, ["<answer>[{'action': 'click', 'coordinate': [8, 8]}]</answer>"], [gold], scales=[[2.0, 1.5]])
    [1.0]
    """
    if len(solution) != len(completions):
        raise ValueError(f"column solution has {len(solution)} entries but there are {len(completions)} completions")
    out = []
    for c, sol, scale in zip(completions, solution, _scales(scales, len(completions))):
        text, gold = completion_text(c), str(sol)
        mine, want = extract_action(text), extract_action(gold)
        if not (mine and want and mine == want):
            out.append(0.0)
            continue
        if mine != "click":
            out.append(1.0)
            continue
        (x, y), _found = extract_coord(text)
        x, y = int(x * float(scale[0])), int(y * float(scale[1]))
        x1, y1, x2, y2 = extract_bbox(gold)[0]
        out.append(1.0 if x1 <= x <= x2 and y1 <= y <= y2 else 0.0)
    return out
