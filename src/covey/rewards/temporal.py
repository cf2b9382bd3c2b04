"""TempSamp-R1's temporal-grounding reward ("TempSamp-R1: Effective Temporal Sampling with Reinforcement
Fine-Tuning for Video LLMs", arXiv 2509.18056), checked against the authors' release,
ZhangZikun6666/TempSamp-R1 55a92280a934 `scripts/timelens/timelens_reward.py` (`compute_score`,
temporal branch: `parse_timestamp_from_text`, `compute_temporal_iou`, `_temporal_format_reward`,
`transform_rewards`).

    reward = IoU(pred, gold) + 0.1 * format        (the recipe's FORMAT_WEIGHT)
    IoU    = max(0, min(e, e') - max(s, s')) / (max(e, e') - min(s, s'))     0 when the union is 0
    format = 1 when an <answer> block holds "X to Y", "X and Y" or "X - Y" (the loose check), else 0

Spans are read from the first <answer> block when there is one (else the whole text): the last "X to Y"
/ "X and Y", else the last "X - Y", else the first two numbers; the gold span the same way from the
`answer` column ("<answer> 7.0 to 11.0 </answer>"). TempSamp-R1's non-linear shaping
(`shaping: true`, the recipe's GTPO_REWARD_SHAPING=1) replaces IoU by
`threshold + 0.01 log(IoU - threshold + 1)` at or above `threshold` (0.8) and by
`threshold - (exp(alpha (threshold - IoU)) - 1) / (exp(alpha) - 1)` below it (alpha 1.0).
Not included: the reference's bounding-box branch (a gold with four numbers) and its strict format
variant (TIMELENS_STRICT_FORMAT).
"""

from __future__ import annotations

import math
import re

from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["TemporalIoU", "gt_response", "parse_span", "shaped_iou", "temporal_iou"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TO = re.compile(r"(\d+\.?\d*)\s*(?:to|and)\s*(\d+\.?\d*)")
_DASH = re.compile(r"(\d+\.?\d*)\s*-\s*(\d+\.?\d*)")
_NUM = re.compile(r"\b(\d+\.?\d*)\b")
_FORMAT = re.compile(r"\d+\.?\d*\s*(?:to|and|-)\s*\d+\.?\d*")


def parse_span(text: str) -> tuple[float, float] | None:
    """(start, end) seconds from a text (module docstring), or None.

    >>> parse_span("<think>it is near 3</think><answer> 2.50 to 7 </answer>"), parse_span("from 1 - 4, or 2 - 5")
    ((2.5, 7.0), (2.0, 5.0))
    >>> parse_span("<answer>soon</answer>") is None
    True
    """
    if not text:
        return None
    m = _ANSWER.search(text)
    search = m.group(1) if m else text
    for pattern in (_TO, _DASH):
        found = pattern.findall(search)
        if found:
            return float(found[-1][0]), float(found[-1][1])
    nums = _NUM.findall(search)
    return (float(nums[0]), float(nums[1])) if len(nums) >= 2 else None


def temporal_iou(pred: tuple[float, float], gold: tuple[float, float]) -> float:
    """Temporal IoU of two spans (the reference's `compute_temporal_iou`; a reversed span is not fixed).

    >>> temporal_iou((2, 6), (4, 8)), temporal_iou((0, 1), (2, 3)), temporal_iou((5, 5), (5, 5))
    (0.3333333333333333, 0.0, 0.0)
    """
    inter = max(0.0, min(pred[1], gold[1]) - max(pred[0], gold[0]))
    union = max(pred[1], gold[1]) - min(pred[0], gold[0])
    return inter / union if union > 0 else 0.0


def shaped_iou(iou: float, threshold: float = 0.8, alpha: float = 1.0) -> float:
    """TempSamp-R1's `transform_rewards`.

    >>> round(shaped_iou(1.0), 6), shaped_iou(0.8), round(shaped_iou(0.0), 6)
    (0.801823, 0.8, 0.086764)
    """
    if iou >= threshold:
        return threshold + math.log(iou - threshold + 1.0) * 0.01
    denom = math.exp(alpha) - 1.0
    if denom <= 0:
        return max(0.0, iou)
    return threshold - (math.exp(alpha * (threshold - iou)) - 1.0) / denom


def gt_response(item: dict, column: str = "answer") -> str | None:
    """TempSamp-R1's `build_gt_response`: the gold span of `item[column]` as "<answer> {start:.2f} to
    {end:.2f} </answer>", None when it holds no span (the `gt_injection` strategy's builder).

    >>> gt_response({"answer": "<answer> 2.0 to 6 </answer>"}), gt_response({"answer": "none"})
    ('<answer> 2.00 to 6.00 </answer>', None)
    """
    span = parse_span(str(item.get(column) or ""))
    return None if span is None else f"<answer> {span[0]:.2f} to {span[1]:.2f} </answer>"


def _format_ok(text: str) -> bool:
    m = _ANSWER.search(text) if text else None
    return bool(m and _FORMAT.search(m.group(1)))


@register_reward("temporal_iou", paper="TempSamp-R1", arxiv="2509.18056")
class TemporalIoU:
    """IoU of the answered span with the gold span in column `answer_column`, plus `format_weight` x the
    loose format check (module docstring). A gold without a span scores 0.0 (the reference's "unknown task").
    `shaping: true` applies TempSamp-R1's IoU shaping (the recipe's setting; off by default, as the
    reference's environment default). A callable class, so it pickles into reward workers.

    >>> TemporalIoU()(None, ["<answer> 2.0 to 6.0 </answer>", "2 to 6", "<answer>late</answer>"], answer=["<answer> 4.0 to 8.0 </answer>"] * 3)
    [0.43333333333333335, 0.3333333333333333, 0.0]
    """

    def __init__(self, answer_column: str = "answer", format_weight: float = 0.1, shaping: bool = False,
                 threshold: float = 0.8, alpha: float = 1.0):  # fmt: skip
        for name, v in (("format_weight", format_weight), ("threshold", threshold), ("alpha", alpha)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"temporal_iou: {name} must be a finite number, got {v!r}")
        self.answer_column, self.format_weight, self.shaping = answer_column, float(format_weight), bool(shaping)
        self.threshold, self.alpha = float(threshold), float(alpha)

    def __call__(self, prompts, completions, **columns) -> list[float]:
        gold = columns.get(self.answer_column)
        if gold is None:
            raise ValueError(f"temporal_iou: the batch has no column {self.answer_column!r} (the gold span)")
        if len(gold) != len(completions):
            raise ValueError(f"column {self.answer_column} has {len(gold)} entries but there are {len(completions)} completions")
        out = []
        for c, g in zip(completions, gold):
            text, want = completion_text(c), parse_span(str(g))
            if want is None:
                out.append(0.0)
                continue
            pred = parse_span(text)
            iou = temporal_iou(pred, want) if pred is not None else 0.0
            if self.shaping:
                iou = shaped_iou(iou, self.threshold, self.alpha)
            out.append(iou + self.format_weight * float(_format_ok(text)))
        return out
