r"""`fapo`: the flawed-positive penalty of FAPO (arXiv 2510.22543), a generative process reward model
(GenRM) judging the rule-correct answers.

Checked against the authors' code: yyDing1/FAPO 746aa64, ``fapo/fapo_reasoning/reward_fn.py::
compute_score_fapo``:

    rule:     pred = the last \boxed{} of the last 300 characters; correct = pred equals the ground truth
    correct   -> ask the GenRM (template `step_error_index`: "...return the index of the step where the
                 earliest error occurs. Otherwise, return the index of -1...") and read the last \boxed{}
                 integer (`boxed_int`); index != -1 -> 0.0 (a flawed positive), else +1.0
    incorrect -> -1.0, and the GenRM is not asked

The full solution goes into the prompt (no step numbering), as in the reference. Departures: the
answer check is covey's `math_equal` (numeric / symbolic equivalence) where FAPO compares
`normalize_final_answer` strings (a superset: every FAPO match is a covey match); the reference
``int(eval(...))``s the box, covey reads an integer literal only (``\boxed{1+1}`` is unreadable here).
A GenRM that fails (no readable index, an HTTP error): ``on_fail: clean`` (default, the reference: not
flawed, +1.0) or ``none`` (NaN: a counted failure). Metrics: ``flawed_positive_frac`` (among the
rule-correct rows the GenRM read), ``rule_accuracy``, and the judge metrics (over GenRM requests).

`fapo_genrm`: the reward that trains the GenRM itself (``fapo/fapo_genrm/reward_fn.py::
compute_score_fapo_genrm``, as the spec read it): the prediction is the last \boxed{} integer of the
reply's last 300 characters; valid when it is -1 or in [0, total_steps)

    invalid -> -1;  gt = -1: +1 if pred = -1 else -1;  gt != -1: -1 if pred = -1 else 1 - |pred - gt| / total_steps
"""

from __future__ import annotations

import math
from typing import Any

from covey.rewards._scoring import RewardOutput
from covey.rewards.judge.core import Judge, JudgeHolder
from covey.rewards.judge.reward import judge_metrics, prompt_text
from covey.rewards.math import completion_text, extract_boxed, math_equal
from covey.rewards.registry import register_reward

__all__ = ["FapoReward", "fapo_genrm", "genrm_score"]


@register_reward("fapo")
class FapoReward(JudgeHolder):
    """+1 correct and clean, 0 correct but flawed (the GenRM found an erroneous step), -1 incorrect.

    backend: the GenRM's backend (the paper serves FAPO-GenRM-4B behind an OpenAI-compatible router);
    template (step_error_index), parser (boxed_int), max_new_tokens (the reference allows 16384; 1024 here),
    temperature, parse_retries, cache_size / cache_file: as for the `judge` reward.
    answer_column: the ground truth column. on_fail: clean | none.
    """

    def __init__(self, backend: Any, template: str = "step_error_index", parser: Any = "boxed_int",
                 answer_column: str = "answer", max_new_tokens: int = 1024, temperature: float = 0.0,
                 parse_retries: int = 0, on_fail: str = "clean", cache_size: int = 8192, cache_file: str | None = None):
        if on_fail not in ("clean", "none"):
            raise ValueError(f"fapo: on_fail must be clean or none, got {on_fail!r}")
        self.judge = Judge(backend, template, parser, max_new_tokens=max_new_tokens, temperature=temperature,
                           parse_retries=parse_retries, cache_size=cache_size, cache_file=cache_file)
        if self.judge.parser_name != "boxed_int":
            raise ValueError("fapo: the parser must be boxed_int (the GenRM's step index)")
        self.answer_column, self.on_fail = answer_column, on_fail
        self.__name__ = "fapo"

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        truth = columns.get(self.answer_column)
        if truth is None:
            raise ValueError(f"fapo needs the ground truth column {self.answer_column!r}; the batch has {sorted(columns)}")
        texts = [completion_text(c) for c in completions]
        correct = [gt is not None and math_equal(extract_boxed(t[-300:]), str(gt)) for t, gt in zip(texts, truth)]
        scores: list[float] = [1.0 if ok else -1.0 for ok in correct]
        asked = [i for i, ok in enumerate(correct) if ok]
        fields = [{"prompt": prompt_text(prompts[i]), "completion": texts[i], "answer": str(truth[i])} for i in asked]
        values, why, stats = self.judge.ask(fields) if asked else ([], [], {})
        flawed = []
        for i, v in zip(asked, values):
            if v is None:
                scores[i] = math.nan if self.on_fail == "none" else 1.0
            else:
                flawed.append(float(v != -1))
                scores[i] = 0.0 if v != -1 else 1.0
        metrics = judge_metrics(stats, why, len(completions)) if asked else {}
        metrics["rule_accuracy"] = [float(ok) for ok in correct]
        if flawed:
            metrics["flawed_positive_frac"] = flawed
        return RewardOutput(scores, metrics)


def genrm_score(pred: int | None, gt: int, total_steps: int) -> float:
    """The GenRM's reward for predicting the first erroneous step `pred` (None: unreadable) against `gt`.

    >>> [genrm_score(p, g, 10) for p, g in [(5, 3), (3, 3), (-1, 3), (-1, -1), (2, -1), (None, 2), (10, 2)]]
    [0.8, 1.0, -1.0, 1.0, -1.0, -1.0, -1.0]
    """
    if pred is None or not (pred == -1 or 0 <= pred < total_steps):
        return -1.0
    if gt == -1:
        return 1.0 if pred == -1 else -1.0
    return -1.0 if pred == -1 else 1.0 - abs(pred - gt) / total_steps


@register_reward("fapo_genrm")
def fapo_genrm(prompts, completions, error_step, total_steps, **_) -> list[float | None]:
    """FAPO's GenRM training reward; items carry ``error_step`` (-1: no error) and ``total_steps``."""
    out: list[float | None] = []
    for c, gt, n in zip(completions, error_step, total_steps):
        if gt is None or n is None:
            out.append(None)
            continue
        inner = extract_boxed(completion_text(c)[-300:])
        try:
            pred = int(inner.strip()) if inner is not None else None
        except ValueError:
            pred = None
        out.append(genrm_score(pred, int(gt), int(n)))
    return out
