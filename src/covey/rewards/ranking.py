"""`urpo_ranking_provisional`: URPO's reward for preference items recast as a ranking task.

Paper: "URPO: A Unified Reward & Policy Optimization Framework for Large Language Models" (arXiv 2507.17515).
RECONSTRUCTED: no code was released (searched); the abstract and a summary confirm one model as player and
referee in one GRPO loop, with preference data recast as a generative task ("preference triples with N-way
ranking") among verifiable problems and open instructions (mixed batches: the `switch` combinator). How the
ranking is scored is covey's design (reconstructed): the completion's ranking of the item's
m candidates against the gold ranking,

    mode "top1":     1 if the completion ranks the gold best candidate first, else 0
    mode "kendall":  (tau + 1) / 2, tau = (concordant - discordant) / (m (m - 1) / 2) over candidate pairs

A ranking is read from the completion's last line that names candidates: the labels in order (numbers,
optionally in brackets: "[2] > [1] > [3]", "Ranking: 2, 1, 3"); it must be a permutation of 1..m, else the
completion scores 0 (`invalid` metric). The gold ranking is the item column `ranking_column` (a list of 1-based
labels, best first).

>>> out = urpo_ranking_provisional(["q"] * 3, ["[2] > [1] > [3]", "1, 2, 3", "2 2 3"], ranking=[[2, 1, 3]] * 3)
>>> [round(s, 4) for s in out.scores], out.metrics["invalid"]  # tau(1 2 3 | 2 1 3) = 1/3 -> 2/3
([1.0, 0.6667, 0.0], [0.0, 0.0, 1.0])
"""

from __future__ import annotations

import re
from typing import Literal

from covey.rewards._scoring import RewardOutput
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["kendall_tau", "parse_ranking", "urpo_ranking_provisional"]


def parse_ranking(text: str, m: int) -> list[int] | None:
    """The permutation of 1..m on the last line of `text` that holds m numbers, else None."""
    for line in reversed(text.strip().splitlines()):
        labels = [int(x) for x in re.findall(r"\d+", line)]
        if len(labels) == m:
            return labels if sorted(labels) == list(range(1, m + 1)) else None
    return None


def kendall_tau(pred: list[int], gold: list[int]) -> float:
    """Kendall's tau between two rankings of the same labels (best first), in [-1, 1]."""
    m = len(gold)
    if m < 2:
        raise ValueError("kendall_tau needs at least two candidates")
    rank_p = {lab: i for i, lab in enumerate(pred)}
    score = 0
    for i in range(m):
        for j in range(i + 1, m):  # gold says gold[i] before gold[j]
            score += 1 if rank_p[gold[i]] < rank_p[gold[j]] else -1
    return score / (m * (m - 1) / 2)


@register_reward("urpo_ranking_provisional")
def urpo_ranking_provisional(prompts, completions, ranking=None, *, mode: Literal["top1", "kendall"] = "kendall",
                             **columns) -> RewardOutput:  # fmt: skip
    """The ranking-agreement reward (module docstring); `ranking`: the gold rankings, one list per row."""
    if ranking is None:
        raise ValueError("urpo_ranking_provisional reads the gold `ranking` column (1-based candidate labels, best first)")
    scores, invalid = [], []
    for c, gold in zip(completions, ranking):
        gold = [int(x) for x in gold]
        if len(gold) < 2 or sorted(gold) != list(range(1, len(gold) + 1)):
            raise ValueError(f"urpo_ranking_provisional: a gold ranking must be a permutation of 1..m with m >= 2, got {gold}")
        pred = parse_ranking(completion_text(c), len(gold))
        invalid.append(float(pred is None))
        if pred is None:
            scores.append(0.0)
        elif mode == "top1":
            scores.append(float(pred[0] == gold[0]))
        else:
            scores.append((kendall_tau(pred, gold) + 1) / 2)
    return RewardOutput(scores, {"invalid": invalid})
