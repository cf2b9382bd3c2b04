"""Label-free majority-vote reward over a group (TTRL).

"TTRL: Test-Time Reinforcement Learning" (arXiv 2504.16084; PRIME-RL/TTRL
`verl/utils/reward_score/ttrl/ttt_metrics.py::test_time_train_metrics`):

    answers  = extract(completion_i) for the G completions of a prompt
    label    = most common answer (ties: first seen, as Counter.most_common)
    reward_i = 1 if verify(answer_i, label) else 0          (the same verifier as with gold answers)

Needs the runner's ``group`` column (completions of one prompt share a group id); it is marked
``group_aware`` so the runner never splits a group across calls. Departures: votes are counted on
`normalize_answer` keys, so "$5" and "5" vote together (TTRL counts exact strings); completions with no
extractable answer do not vote and score 0. TTRL's vote-then-downsample (64 votes, train on 32) is the
sampler's business, not this reward's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from covey.rewards._scoring import RewardOutput
from covey.rewards.math import EXTRACTION_MODES, completion_text, extract_answer, math_equal, normalize_answer
from covey.rewards.registry import register_reward

__all__ = ["MajorityVoteReward"]


@register_reward("majority_vote")
class MajorityVoteReward:
    """1.0 for completions whose extracted answer matches their group's majority answer.

    Returns `RewardOutput` with metrics (one value per group): ``majority_ratio`` (votes for the
    label / group size), and, where the `answer_column` holds a true answer, ``label_accuracy``
    (label == truth) and ``reward_accuracy`` (per sample: pseudo reward == true reward).

    >>> out = MajorityVoteReward()(prompts=None, completions=["#### 4", "#### 5", "#### 4", "#### 7"],
    ...                           group=[0, 0, 0, 1], answer=["5", "5", "5", "7"])
    >>> out.scores, out.metrics["label_accuracy"], out.metrics["majority_ratio"]
    ([1.0, 0.0, 1.0, 1.0], [0.0, 1.0], [0.6666666666666666, 1.0])
    """

    group_aware = True

    def __init__(self, order: Sequence[str] = EXTRACTION_MODES, answer_column: str = "answer"):
        bad = [m for m in order if m not in EXTRACTION_MODES]
        if bad or not order:
            raise ValueError(f"MajorityVoteReward: order must be modes from {EXTRACTION_MODES}, got {list(order)}")
        self.order, self.answer_column = list(order), answer_column

    def __call__(self, prompts, completions, group=None, **columns) -> RewardOutput:
        if group is None:
            raise ValueError(
                "majority_vote needs the 'group' column (group ids of the completions); pass group=... to the "
                "reward runner"
            )
        truth = columns.get(self.answer_column)
        answers = [extract_answer(completion_text(c), order=self.order) for c in completions]
        members: dict = {}
        for i, g in enumerate(group):
            members.setdefault(g, []).append(i)
        scores = [0.0] * len(completions)
        metrics: dict[str, list[float]] = {"majority_ratio": []}
        for idx in members.values():
            votes: Counter = Counter()
            first: dict[str, str] = {}
            for i in idx:
                if answers[i] is not None:
                    key = normalize_answer(answers[i])
                    votes[key] += 1
                    first.setdefault(key, answers[i])
            label, count = None, 0
            if votes:  # no answer at all: no label, every completion scores 0
                key, count = votes.most_common(1)[0]
                label = first[key]
            metrics["majority_ratio"].append(count / len(idx))
            for i in idx:
                scores[i] = 1.0 if label is not None and math_equal(answers[i], label) else 0.0
            gold = truth[idx[0]] if truth is not None else None
            if gold is not None and str(gold).strip():
                metrics.setdefault("label_accuracy", []).append(1.0 if math_equal(label, gold) else 0.0)
                for i in idx:
                    true_reward = 1.0 if math_equal(answers[i], gold) else 0.0
                    metrics.setdefault("reward_accuracy", []).append(1.0 if true_reward == scores[i] else 0.0)
        return RewardOutput(scores, metrics)
