"""`judge`: a pointwise LLM-as-judge reward (one judge request per completion).

    score_i = parser(backend(template(prompt_i, completion_i, answer_i)))

Config: ``rewards: [{name: judge, params: {backend: {kind: local, model: tiny-llama}, template: yes_no_match,
parser: yes_no}}]``. Parameters: see `JudgeReward`. Failures (a reply that does not parse after
`parse_retries`, or a backend error) get `on_fail`:

    none  NaN: the runner counts the sample under reward/<name>/failures/nan and gives it the reward's
          `fallback`; a judge that fails on every sample for `max_failed_steps` steps stops the run
          (the default: a judge that is down must not silently train on zeros)
    zero  0.0, counted in the judge's own metrics only (MediX-R1's behaviour)
    tie   the parser's midpoint (yes_no 0.5; number_in_range (lo + hi) / 2)

Metrics (per batch, ``reward/<name>/...``): judge_requests (backend requests per sample), cache_hit_frac,
parse_fail_frac (after retries), backend_error_frac, http_errors (failed attempts per sample), and
verifier_agreement (the runner's audit: fraction of samples where the judge's verdict, score >=
`audit_threshold`, equals the task verifier's, column `accuracy`, when the run has one).
"""

from __future__ import annotations

import math
from typing import Any

from covey.rewards._scoring import RewardOutput
from covey.rewards.judge.core import Judge, JudgeHolder
from covey.rewards.judge.parsers import PARSERS
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["JudgeReward", "ON_FAIL", "prompt_text"]

ON_FAIL = ("none", "zero", "tie")


def prompt_text(prompt) -> str:
    """The last user message of a chat prompt, or the text prompt itself."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else completion_text(prompt)
    return str(prompt)


@register_reward("judge")
class JudgeReward(JudgeHolder):
    """A model judges each completion.

    backend:          {kind: local, model, dtype, device, seed} | {kind: openai, base_url, model, api_key_env,
                      concurrency, timeout_s, retries, backoff_s}  (see `covey.rewards.judge.backends`)
    template:         a built-in (yes_no_match, step_error_index, score_0_10), a template string with
                      {prompt} / {completion} / {answer}, or a file holding one; template_system: an
                      optional system message for a user template
    parser:           yes_no | boxed_int | number_in_range | yes_no_logits, or {name: ..., options}
    reference_column: the item column the template's {answer} reads
    max_new_tokens, temperature, top_p, stop, seed: decoding (greedy at temperature 0)
    parse_retries:    re-asks of a reply that does not parse (at retry_temperature, a new seed)
    on_fail:          none | zero | tie (module docstring)
    cache_size:       in-memory LRU entries; cache_file: optional SQLite file (e.g. runs/x/judge_cache.sqlite)
    audit_against:    the verifier column the runner compares verdicts with (None: no audit)
    audit_columns:    boolean item columns the agreement is also split by (e.g. a trigger flag)
    """

    def __init__(self, backend: Any, template: str = "yes_no_match", parser: Any = "yes_no",
                 reference_column: str = "answer", max_new_tokens: int = 4, temperature: float = 0.0,
                 top_p: float = 1.0, stop: list[str] | None = None, seed: int = 0, parse_retries: int = 1,
                 retry_temperature: float = 0.7, on_fail: str = "none", cache_size: int = 8192,
                 cache_file: str | None = None, template_system: str | None = None,
                 audit_against: str | None = "accuracy", audit_columns: list[str] | None = None):
        if on_fail not in ON_FAIL:
            raise ValueError(f"judge: on_fail must be one of {', '.join(ON_FAIL)}, got {on_fail!r}")
        self.judge = Judge(backend, template, parser, max_new_tokens=max_new_tokens, temperature=temperature,
                           top_p=top_p, stop=tuple(stop or ()), seed=seed, parse_retries=parse_retries,
                           retry_temperature=retry_temperature, cache_size=cache_size, cache_file=cache_file,
                           template_system=template_system)
        if self.judge.template.pairwise:
            raise ValueError("judge: a pairwise template ({a}/{b}) compares two completions; use the arenarl reward")
        if self.judge.parser_name == "json_pair":
            raise ValueError("judge: json_pair reads a pair of scores; use it with the arenarl reward")
        tie = PARSERS[self.judge.parser_name][2]
        if tie == "mid":
            p = self.judge.parser_params
            tie = (p.get("lo", 0.0) + p.get("hi", 10.0)) / 2
        if on_fail == "tie" and tie is None:
            raise ValueError(f"judge: on_fail 'tie' has no meaning for parser {self.judge.parser_name!r}; use none or zero")
        self.on_fail, self.tie = on_fail, tie
        self.reference_column = reference_column
        self.audit_against = audit_against if self.judge.parser_name != "boxed_int" else None
        self.audit_threshold = tie if isinstance(tie, float) else 0.5
        self.audit_columns = list(audit_columns or [])
        self.__name__ = "judge"

    def _failed(self) -> float:
        return math.nan if self.on_fail == "none" else 0.0 if self.on_fail == "zero" else float(self.tie)

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        n = len(completions)
        answers = columns.get(self.reference_column)
        if "answer" in self.judge.template.fields and answers is None:
            raise ValueError(f"judge: the template reads {{answer}} from column {self.reference_column!r}, which the "
                             f"batch lacks (columns: {sorted(columns)}); set reference_column")
        fields = [{"prompt": prompt_text(p), "completion": completion_text(c),
                   "answer": "" if answers is None or answers[i] is None else str(answers[i])}
                  for i, (p, c) in enumerate(zip(prompts, completions))]
        values, why, stats = self.judge.ask(fields)
        scores = [self._failed() if v is None else float(v) for v in values]
        return RewardOutput(scores, judge_metrics(stats, why, n))


def judge_metrics(stats: dict[str, float], failures: list[str | None], samples: int) -> dict[str, list[float]]:
    """Metric values the runner averages over the batch: requests sent to the backend and failed HTTP
    attempts per sample; cache hits, parse failures and backend errors as fractions of the judge questions."""
    n, q = max(1, samples), max(1, len(failures))
    return {
        "judge_requests": [stats["requests"] / n] * n,
        "http_errors": [stats["http_errors"] / n] * n,
        "cache_hit_frac": [stats["cache_hits"] / q] * q,
        "parse_fail_frac": [float(f == "parse") for f in failures],
        "backend_error_frac": [float(f == "backend") for f in failures],
    }
