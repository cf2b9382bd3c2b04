"""`entity_match`: E-GRPO's entity-aware dense reward for search agents (arXiv 2510.24694).

Named `entity_match`, not `e_grpo`: another paper's E-GRPO (entropy-guided GRPO for flow models) would
collide. Partly reconstructed: no released code was found (searched 2026-11-24); the rule is the spec's
(from the abstract and a summary); alpha's default and the exact
normalisation are UNVERIFIED.

    gamma_i     = |{e in E(q) : normalize(e) occurs in normalize(text_i)}| / |E(q)|
    gamma_hat_i = gamma_i / max_{j in group, well-formed} gamma_j          (0 when that max is 0)
    r_i = 1                     o_i is correct
          alpha * gamma_hat_i   o_i is wrong and well-formed
          0                     format error (no <answer>...</answer> when answer_tag) or over-length

With `evidence_column` (E-GRPO in agent episodes), gamma_i counts the entities in the row's evidence
instead of its text: the column's string, or its strings joined by newlines (search_qa's `retrieved`
documents, under ``rollout.strategy: {name: episodes, rewards: functions}``, where the completion is the
episode's final turn). The answer is still read from the completion: retrieving, or naming, every entity
without answering earns at most alpha.

Correct: the normalised answer (the last <answer>...</answer>, or the whole text when answer_tag is
false) equals a normalised ground truth (a string or a list of strings). normalize = SQuAD's
(`covey.rewards.text.normalize_text`). Over-length: completion_length >= max_length (when given; the
completion was cut at max_new_tokens). A row whose item has no entities gets gamma = 0.
"""

from __future__ import annotations

import re

from covey.rewards._scoring import RewardOutput
from covey.rewards.group import iter_units
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward
from covey.rewards.text import normalize_text

__all__ = ["EntityMatchReward", "entity_rate"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def entity_rate(text: str, entities) -> float:
    """Fraction of the entities whose normalised form occurs (as whole words) in the normalised text.

    >>> entity_rate("Marie Curie won in Stockholm.", ["Marie Curie", "Paris", "stockholm", "Nobel"])
    0.5
    """
    ents = [normalize_text(e) for e in (entities or [])]
    ents = [e for e in ents if e]
    if not ents:
        return 0.0
    padded = f" {normalize_text(text)} "
    return sum(f" {e} " in padded for e in ents) / len(ents)


@register_reward("entity_match")
class EntityMatchReward:
    """E-GRPO's reward (module docstring). Group-wise (gamma is normalised by the group's maximum).

    entities_column (entities), answer_column (answer), alpha (0.3, UNVERIFIED), answer_tag (true: the
    answer is the last <answer>...</answer>, none is a format error), max_length (null: no over-length check),
    evidence_column (null: gamma from the completion; a column name: gamma from that column's text).
    """

    group_aware = True

    def __init__(self, entities_column: str = "entities", answer_column: str = "answer", alpha: float = 0.3,
                 answer_tag: bool = True, max_length: int | None = None, evidence_column: str | None = None):
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"entity_match: alpha must be in [0, 1], got {alpha}")
        self.entities_column, self.answer_column, self.alpha = entities_column, answer_column, float(alpha)
        self.answer_tag, self.max_length, self.evidence_column = bool(answer_tag), max_length, evidence_column
        self.__name__ = "entity_match"

    def __call__(self, prompts, completions, group=None, completion_length=None, **columns) -> RewardOutput:
        ents, truth = columns.get(self.entities_column), columns.get(self.answer_column)
        if ents is None or truth is None:
            raise ValueError(f"entity_match needs the {self.entities_column!r} and {self.answer_column!r} columns; "
                             f"the batch has {sorted(columns)}")
        evidence = columns.get(self.evidence_column) if self.evidence_column else None
        if self.evidence_column and evidence is None:
            raise ValueError(f"entity_match: evidence_column {self.evidence_column!r} is not a column of the batch "
                             f"(it has {sorted(columns)}); an episode env reports it in info['columns']")
        n = len(completions)
        group = group if group is not None else [0] * n
        texts = [completion_text(c) for c in completions]
        scores = [0.0] * n
        gammas, correct, formed = [0.0] * n, [False] * n, [True] * n
        for i, t in enumerate(texts):
            found = _ANSWER.findall(t)
            if self.answer_tag and not found:
                formed[i] = False
            if self.max_length is not None and completion_length is not None and completion_length[i] >= self.max_length:
                formed[i] = False
            answer = normalize_text(found[-1] if found else t)
            golds = truth[i] if isinstance(truth[i], (list, tuple)) else [truth[i]]
            correct[i] = formed[i] and any(g is not None and answer == normalize_text(str(g)) for g in golds)
            gammas[i] = entity_rate(t if evidence is None else _text(evidence[i]), ents[i])
        for idx in iter_units(group).values():
            top = max((gammas[i] for i in idx if formed[i]), default=0.0)
            for i in idx:
                if correct[i]:
                    scores[i] = 1.0
                elif formed[i] and top > 0:
                    scores[i] = self.alpha * gammas[i] / top
        return RewardOutput(scores, {"entity_rate": gammas, "format_error_frac": [float(not f) for f in formed],
                                     "answer_accuracy": [float(c) for c in correct]})


def _text(evidence) -> str:
    """A row's evidence as one text: a string, or strings (documents) joined by newlines."""
    if evidence is None:
        return ""
    if isinstance(evidence, str):
        return evidence
    return "\n".join(str(x) for x in evidence)
