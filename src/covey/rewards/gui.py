"""GUI grounding rewards: a completion names candidate points on a screen, the item carries the target box.

`aer_gui` is the Adaptive Exploration Reward of "InfiGUI-G1: Advancing GUI Grounding with Adaptive
Exploration Policy Optimization" (arXiv 2508.05731), checked against volcengine/verl 2efc20fe064a
recipe/infigui-g1/reward_fn.py (the authors' recipe, trained there with RLOO, run_3b.sh).
`first_point_in_box` is the usual grounding accuracy (the first candidate inside the box), used by the
`gui_points` task as its verifier. One parser serves both (`parse_points`).

Departure from the recipe, for completions written to hurt: a list of more than `MAX_POINTS` (64) points is a
format error (-1), since the recipe's collinearity test looks at every triple (2,000 points are 1.3e9
triples: the reward never returned), and JSON nested past the recursion limit is a format error, not an
exception.
"""

from __future__ import annotations

import json
import math
import re
from itertools import combinations
from numbers import Real

from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["AerGuiReward", "aer_gui_score", "first_point_in_box", "parse_points", "think_answer"]

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
MAX_POINTS = 64


def think_answer(text: str) -> str | None:
    """The answer after a ``<think>…</think>`` prefix, or None when the format is wrong.

    The completion must start with ``<think>`` (no leading space), hold exactly one ``<think>`` and one
    ``</think>``, a non-empty thought, and non-empty text after ``</think>`` (returned stripped).

    >>> think_answer("<think>it is top left</think> [1]"), think_answer(" <think>x</think> [1]")
    ('[1]', None)
    >>> think_answer("<think> </think> [1]"), think_answer("<think>x</think>  ")
    (None, None)
    """
    if not text or not text.startswith("<think>") or _THINK_RE.search(text) is None:
        return None
    if text.count("<think>") != 1 or text.count("</think>") != 1:
        return None
    if not _THINK_RE.search(text).group(1).strip():
        return None
    answer = text[text.find("</think>") + len("</think>"):].strip()
    return answer or None


def parse_points(answer: str) -> list[list] | None:
    """The candidate points of an answer, best first, or None when it is not a JSON list of
    ``{"point_2d": [x, y]}``.

    The JSON is the text from the first ``[`` to the last ``]``; every element must be an object with a
    ``point_2d`` list of two values (their types are not checked here: a non-numeric one fails where the
    reward reads it). An empty list is well formed (N = 0).

    >>> parse_points('points: [{"point_2d": [3, 4]}, {"point_2d": [5, 6]}] done')
    [[3, 4], [5, 6]]
    >>> parse_points("[]"), parse_points('[{"point_2d": [3]}]'), parse_points('{"point_2d": [3, 4]}')
    ([], None, None)
    >>> parse_points(str([{"point_2d": [i, 0]} for i in range(MAX_POINTS + 1)]).replace("'", '"')) is None
    True
    """
    start, end = answer.find("["), answer.rfind("]")
    if start == -1 or end == -1 or start >= end:
        return None
    try:
        items = json.loads(answer[start:end + 1])
    except (ValueError, RecursionError):  # also a 4,300+ digit integer, or nesting past the recursion limit
        return None
    if not isinstance(items, list) or len(items) > MAX_POINTS:
        return None
    points = []
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("point_2d"), list) and len(item["point_2d"]) == 2):
            return None
        points.append(item["point_2d"])
    return points


def _collinear(points: list[list]) -> bool:
    """Whether some 3 of the points lie on one line: exact equality of the cross products, so a repeated
    point with any third one counts (the recipe's test)."""
    for (xa, ya), (xb, yb), (xc, yc) in combinations(points, 3):
        if (yb - ya) * (xc - xa) == (yc - ya) * (xb - xa):
            return True
    return False


def _inside(point: list, x1, y1, x2, y2) -> bool:
    """Inclusive on every edge; x is compared first and y only when x is inside (as the recipe does)."""
    return x1 <= point[0] <= x2 and y1 <= point[1] <= y2


def aer_gui_score(text: str, x1, y1, x2, y2, *, fmt_ratio: float = 1.0, acc_ratio: float = 1.0,
                  no_think: bool = False) -> float:
    """The Adaptive Exploration Reward of one completion against the box (x1, y1)-(x2, y2).

    -1 on a format error (no think prefix unless `no_think`, no JSON point list, 3 or more collinear
    points, or a coordinate that cannot be compared); otherwise ``fmt_ratio * 1 + acc_ratio * accuracy``
    with N points and k the 1-based rank of the first point inside the box:
    accuracy = 1/sqrt(N k) if one is inside, -1/N if none is, -1 if N = 0.

    >>> box = (10, 10, 20, 20)
    >>> round(aer_gui_score('[{"point_2d": [0, 0]}, {"point_2d": [15, 12]}, {"point_2d": [30, 5]}]', *box, no_think=True), 4)
    1.4082
    >>> aer_gui_score('<think>two guesses</think>[{"point_2d": [0, 0]}, {"point_2d": [1, 5]}]', *box)
    0.5
    """
    answer = text if no_think else think_answer(text)
    points = None if answer is None else parse_points(answer)
    if points is None:
        return -1.0
    try:  # a non-numeric coordinate raises here; the recipe's dispatcher scores any such error -1
        if _collinear(points):
            return -1.0
        k = next((rank for rank, p in enumerate(points, 1) if _inside(p, x1, y1, x2, y2)), None)
    except TypeError:
        return -1.0
    n = len(points)
    accuracy = -1.0 if n == 0 else 1.0 / math.sqrt(n * k) if k is not None else -1.0 / n
    return fmt_ratio * 1.0 + acc_ratio * accuracy


def first_point_in_box(text: str, x1, y1, x2, y2, *, no_think: bool = False) -> float:
    """1.0 when the answer is well formed (as for `aer_gui_score`) and its FIRST point is inside the box.

    >>> first_point_in_box('<think>it is there</think>[{"point_2d": [15, 15]}, {"point_2d": [0, 0]}]', 10, 10, 20, 20)
    1.0
    >>> first_point_in_box('[{"point_2d": [0, 0]}, {"point_2d": [15, 15]}]', 10, 10, 20, 20, no_think=True)
    0.0
    """
    answer = text if no_think else think_answer(text)
    points = None if answer is None else parse_points(answer)
    if not points:
        return 0.0
    try:
        return 1.0 if not _collinear(points) and _inside(points[0], x1, y1, x2, y2) else 0.0
    except TypeError:
        return 0.0


def check_boxes(x1, y1, x2, y2, n: int) -> None:
    """The box columns: one real number per completion each (bool refused), x1 <= x2 and y1 <= y2."""
    for name, col in (("x1", x1), ("y1", y1), ("x2", x2), ("y2", y2)):
        if len(col) != n:
            raise ValueError(f"column {name} has {len(col)} entries but there are {n} completions")
        bad = [v for v in col if isinstance(v, bool) or not isinstance(v, Real)]
        if bad:
            raise ValueError(f"column {name} must hold numbers, got {bad[0]!r}")
    flipped = [i for i in range(n) if x1[i] > x2[i] or y1[i] > y2[i]]
    if flipped:
        i = flipped[0]
        raise ValueError(f"box {i} has x1 > x2 or y1 > y2: ({x1[i]}, {y1[i]}, {x2[i]}, {y2[i]})")


@register_reward("aer_gui", paper="InfiGUI-G1 (AER)", arxiv="2508.05731")
class AerGuiReward:
    r"""InfiGUI-G1's Adaptive Exploration Reward (arXiv 2508.05731) for GUI grounding with candidate points.

    The completion is ``<think>…</think>`` then a JSON list ``[{"point_2d": [x, y]}, …]`` of N candidate
    points, best first (``no_think=True``: the whole completion is the answer, no think block). The items
    carry the target box as columns x1, y1, x2, y2 (edges inclusive). With k the rank of the first point
    inside the box: ``fmt_ratio + acc_ratio / sqrt(N k)``; none inside: ``fmt_ratio - acc_ratio / N``;
    N = 0: ``fmt_ratio - acc_ratio``; a format error (bad think block, not a point list, 3 or more
    collinear points (a repeated point included), a non-numeric coordinate it reads): -1, whatever the
    ratios. Duplicated points count in N. Defaults fmt_ratio = acc_ratio = 1 (the recipe's constants).
    Checked against volcengine/verl 2efc20fe064a recipe/infigui-g1/reward_fn.py (`calculate_point_reward`).
    A callable class, so it pickles into reward workers.

    >>> reward = AerGuiReward(no_think=True)
    >>> reward(prompts=None, completions=['[{"point_2d": [15, 15]}]', '[{"point_2d": [0, 0]}, {"point_2d": [1, 1]}, {"point_2d": [2, 2]}]'],
    ...        x1=[10, 10], y1=[10, 10], x2=[20, 20], y2=[20, 20])
    [2.0, -1.0]
    """

    def __init__(self, fmt_ratio: float = 1.0, acc_ratio: float = 1.0, no_think: bool = False):
        for name, v in (("fmt_ratio", fmt_ratio), ("acc_ratio", acc_ratio)):
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
                raise ValueError(f"aer_gui: {name} must be a finite number, got {v!r}")
        if not isinstance(no_think, bool):
            raise ValueError(f"aer_gui: no_think must be true or false, got {no_think!r}")
        self.fmt_ratio, self.acc_ratio, self.no_think = float(fmt_ratio), float(acc_ratio), no_think

    def __call__(self, prompts, completions, x1, y1, x2, y2, **_) -> list[float]:
        check_boxes(x1, y1, x2, y2, len(completions))
        return [
            aer_gui_score(completion_text(c), *box, fmt_ratio=self.fmt_ratio, acc_ratio=self.acc_ratio,
                          no_think=self.no_think)
            for c, *box in zip(completions, x1, y1, x2, y2)
        ]
