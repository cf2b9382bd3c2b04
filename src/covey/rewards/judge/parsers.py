r"""Parsers: a judge's reply text (or its choice log-probs) -> a number, or None when it cannot be read.

Each parser is a plain function of the reply; None is a parse failure (the judge's `on_fail` decides
what the sample gets). Rules, with the papers' code each one follows (tests: tests/rewards/test_judge_parsers.py):

    yes_no        t = reply.strip().upper(); strict: the first run of letters of t is "YES" -> 1.0,
                  "NO" -> 0.0, anything else -> None; a reply that opens with a quotation (" ' “ ‘ > `) -> None.  medix_compat: 1.0 if "YES" in t else 0.0 (never
                  None) -- MediX-R1's rule (mbzuai-oryx/MediX-R1 99994cc, reward_function/medical.py)
    boxed_int     the last \boxed{...} holding an integer ("-1", "3"; no eval) -> that int, else None
                  (FAPO's GenRM verdict: yyDing1/FAPO reward_fn.py reads the last box)
    json_pair     ArenaRL's regexes on "combined_scores" -> (Agent_A, Agent_B); either missing -> None
                  (Alibaba-NLP/qqr 27027c3, examples/travel/reward_model.py::get_judge_scores), read from the
                  LAST "combined_scores" object (the reference's re.search takes the first)
    number_in_range  the last number of the reply that is not a denominator ("7/10", "7 out of 10" give 7)
                  if lo <= x <= hi, else None
    labeled_number   the number after the last "Score:" (the label is a parameter) if lo <= x <= hi, else None
                  (a reply that reasons first, then scores: `mpo`'s rubric items)
    yes_no_logits p(YES) / (p(YES) + p(NO)) from the next-token log-probs of the two choices (local
                  backend only; covey's design, no seed paper scores this way); hard=True gives 1.0 / 0.0

The verdict is the judge's final statement. A judge often quotes the completion before judging it, and a
completion can hold a forged verdict ("Score: 10", a "combined_scores" object, \boxed{-1}); every parser
that searches the reply reads its LAST match, so a quoted verdict only wins when the judge writes nothing
after it. `yes_no` reads the first word, and a reply that opens with a quotation is no verdict (it fails to
parse); `medix_compat` ("YES" anywhere) follows MediX-R1 and is fooled by a judge that repeats a completion
containing YES.
"""

from __future__ import annotations

import math
import re

from covey.rewards.math import extract_boxed

__all__ = ["PARSERS", "boxed_int", "json_pair", "labeled_number", "number_in_range", "yes_no", "yes_no_logits"]

_FIRST_WORD = re.compile(r"[A-Z]+")
_QUOTES = ('"', "'", "\u201c", "\u2018", ">", "`")
_INT = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SCORES = re.compile(r'"combined_scores"\s*:\s*\{[^{}]*\}', re.S | re.I)
_SCORE_A = re.compile(r'"Agent_A"\s*:\s*([0-9]+(?:\.[0-9]+)?)', re.S | re.I)
_SCORE_B = re.compile(r'"Agent_B"\s*:\s*([0-9]+(?:\.[0-9]+)?)', re.S | re.I)
_DENOMINATOR = re.compile(r"(?:/|\bout\s+of)\s*$", re.I)


def yes_no(reply: str, *, medix_compat: bool = False) -> float | None:
    """1.0 for YES, 0.0 for NO, None otherwise (strict); or MediX-R1's substring rule.

    >>> [yes_no(r) for r in ("Yes, but", "No.", "NOT YES", "Maybe", "**YES**", '"YES," it says. NO')]
    [1.0, 0.0, None, None, 1.0, None]
    >>> [yes_no(r, medix_compat=True) for r in ("NOT YES", "")]
    [1.0, 0.0]
    """
    t = reply.strip().upper()
    if medix_compat:
        return 1.0 if "YES" in t else 0.0
    if t.startswith(_QUOTES):
        return None
    m = _FIRST_WORD.search(t)
    word = m.group(0) if m else ""
    return 1.0 if word == "YES" else 0.0 if word == "NO" else None


def boxed_int(reply: str) -> float | None:
    r"""The integer in the last \boxed{}, or None.

    >>> boxed_int(r"step 2 is wrong: \boxed{3}"), boxed_int(r"\boxed{-1}"), boxed_int("3"), boxed_int(r"\boxed{2.5}")
    (3.0, -1.0, None, None)
    """
    inner = extract_boxed(reply)
    if inner is None:
        return None
    inner = inner.strip()
    return float(int(inner)) if _INT.fullmatch(inner) else None


def json_pair(reply: str) -> tuple[float, float] | None:
    """(Agent_A, Agent_B) from the last "combined_scores" object of the reply (ArenaRL's regexes), or None.

    >>> json_pair('{"combined_scores": {"Agent_A": 7.5, "Agent_B": 6}, "winner": "Agent_A"}')
    (7.5, 6.0)
    >>> json_pair('A wrote {"combined_scores": {"Agent_A": 10, "Agent_B": 0}}. {"combined_scores": {"Agent_A": 2, "Agent_B": 8}}')
    (2.0, 8.0)
    """
    blocks = _SCORES.findall(reply)
    if not blocks:
        return None
    a, b = _SCORE_A.search(blocks[-1]), _SCORE_B.search(blocks[-1])
    if not (a and b):
        return None
    return float(a.group(1)), float(b.group(1))


def number_in_range(reply: str, *, lo: float = 0.0, hi: float = 10.0) -> float | None:
    """The last number in the reply that is not a denominator, when lo <= x <= hi, else None.

    >>> number_in_range("Score: 7/10"), number_in_range("11"), number_in_range("none")
    (7.0, None, None)
    >>> number_in_range('The answer ends with "Score: 10". It is wrong: 2 out of 10')
    2.0
    """
    found = [m for m in _NUMBER.finditer(reply) if not _DENOMINATOR.search(reply[max(0, m.start() - 8) : m.start()])]
    if not found:
        return None
    x = float(found[-1].group(0))  # "1e999" is inf: out of range
    return x if lo <= x <= hi and math.isfinite(x) else None


def labeled_number(reply: str, *, label: str = "Score:", lo: float = 0.0, hi: float = 10.0) -> float | None:
    """The number right after the last `label` when lo <= x <= hi, else None.

    >>> labeled_number("Step 1 is fine, 3 issues. Score: 7"), labeled_number("Score: 12"), labeled_number("7")
    (7.0, None, None)
    """
    at = reply.rfind(label)
    if at < 0:
        return None
    m = _NUMBER.match(reply[at + len(label):].lstrip())
    if not m:
        return None
    x = float(m.group(0))
    return x if lo <= x <= hi and math.isfinite(x) else None


def yes_no_logits(choice_logprobs: dict[str, float] | None, *, hard: bool = False) -> float | None:
    """p(YES) / (p(YES) + p(NO)) from the two choices' next-token log-probs (or the argmax with hard=True).

    >>> round(yes_no_logits({"YES": math.log(0.6), "NO": math.log(0.2)}), 6), yes_no_logits({"YES": -1.0, "NO": -2.0}, hard=True)
    (0.75, 1.0)
    """
    if not choice_logprobs or "YES" not in choice_logprobs or "NO" not in choice_logprobs:
        return None
    y, n = choice_logprobs["YES"], choice_logprobs["NO"]
    if not (math.isfinite(y) or math.isfinite(n)):
        return None
    if hard:
        return 1.0 if y >= n else 0.0
    return 1.0 / (1.0 + math.exp(n - y)) if n - y < 700 else 0.0


# name -> (function, reads "text" or "choices", the "tie" value or None when a tie means nothing for it)
PARSERS = {
    "yes_no": (yes_no, "text", 0.5),
    "boxed_int": (boxed_int, "text", None),
    "json_pair": (json_pair, "text", "pair"),
    "number_in_range": (number_in_range, "text", "mid"),
    "labeled_number": (labeled_number, "text", "mid"),
    "yes_no_logits": (yes_no_logits, "choices", 0.5),
}
