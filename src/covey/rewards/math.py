r"""Math answer checking: extract a final answer, normalise it, and decide equivalence.

Three layers, each usable alone:

1. **Extraction** (`extract_boxed`, `extract_answer`): find the final answer in a completion:
   ``\boxed{...}`` (nested braces; last by default), GSM8K ``#### 42``, "The answer is ...",
   or the last number, tried in a configurable order.
2. **Normalisation** (`normalize_answer`): strip ``$``, ``\text{}``, ``\left``/``\right``,
   thousands separators ("1,234"), trailing units/words ("5 dollars"), ``%`` and ``^\circ``;
   ``\dfrac``/``\tfrac`` become ``\frac``.
3. **Equivalence** (`math_equal`): plain numbers (integers, decimals, ``a/b``, ``\frac{a}{b}``)
   are compared exactly as fractions, or within ``tol`` when either side has a decimal point
   (the fast path, no sympy); anything else goes to ``math_verify.parse``/``verify`` (LaTeX and
   symbolic forms: ``2^{10}`` = ``1024``, ``\sqrt{2}/2`` = ``1/\sqrt{2}``).

math-verify times out with ``signal.alarm``, which raises outside the main thread; off the main
thread we pass its timeout-disabling option (``parsing_timeout=None``, ``timeout_seconds=None``),
so a reward runner in a thread pool never crashes (it must bound time itself).

Reward functions have the TRL signature ``fn(prompts, completions, **columns)``:
`math_accuracy_reward` (1.0/0.0 against the ``answer`` column) and `boxed_format_reward`.
The reward runner, sandboxing and other rewards live elsewhere in `covey.rewards`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from fractions import Fraction

__all__ = [
    "EXTRACTION_MODES",
    "boxed_format_reward",
    "completion_text",
    "extract_answer",
    "extract_boxed",
    "math_accuracy_reward",
    "math_equal",
    "normalize_answer",
    "parse_number",
]

EXTRACTION_MODES = ("boxed", "gsm8k", "answer_is", "last_number")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*")
_GSM8K_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS_RE = re.compile(r"(?i)answer\s*(?:is|:|=)\s*:?\s*([^\n]+)")
# A sign only when the "-" is not a binary minus (no digit, letter or bracket just before it).
_NUMBER = r"(?<![\w)\]}])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?<![\w)\]}])-?\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_PLAIN_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_FRAC_RE = re.compile(r"([+-]?)\\frac\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))")
_THOUSANDS_RE = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])")
_TRAILING_WORDS_RE = re.compile(r"^([+-]?[\d.,/]*\d)\s*((?:[A-Za-z][A-Za-z'\-]*\.?\s*)+)$")


def completion_text(completion) -> str:
    """The text of a completion as TRL passes it: a string, or chat messages (last message wins).

    >>> completion_text([{"role": "assistant", "content": "42"}])
    '42'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    if isinstance(completion, Sequence) and not completion:
        return ""
    raise TypeError(
        f"completion must be a str or a list of chat messages {{'role','content'}}, got {type(completion).__name__}"
    )


def _boxed_spans(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}`` in order, braces matched (``\\boxed 5`` too)."""
    out, end = [], -1
    for m in _BOXED_RE.finditer(text):
        if m.start() < end:  # a box inside the previous box belongs to it
            continue
        i = m.end()
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "{" and text[j - 1] != "\\":
                    depth += 1
                elif text[j] == "}" and text[j - 1] != "\\":
                    depth -= 1
                    if depth == 0:
                        out.append(text[i + 1 : j])
                        end = j
                        break
                j += 1
            # an unclosed brace (completion cut off) yields nothing for this box
        elif m.group(0) != m.group(0).rstrip():  # "\boxed 5": one token after the space
            tok = re.match(r"[^\s$]+", text[i:])
            if tok:
                out.append(tok.group(0))
    return out


def extract_boxed(text: str, *, which: str = "last") -> str | None:
    r"""The content of the last (or first) ``\boxed{}``, nested braces kept; None if there is none.

    >>> extract_boxed(r"so \boxed{\frac{1}{2}} or \boxed{3}")
    '3'
    >>> extract_boxed(r"so \boxed{\frac{1}{2}} or \boxed{3}", which="first")
    '\\frac{1}{2}'
    """
    if which not in ("last", "first"):
        raise ValueError(f"which must be 'last' or 'first', got {which!r}")
    spans = _boxed_spans(text)
    if not spans:
        return None
    return spans[-1] if which == "last" else spans[0]


def _answer_clause(s: str) -> str:
    """The answer in "answer is <clause>": a leading number alone ("5 because ..." -> "5")."""
    s = _strip_sentence_end(s)
    m = re.match(r"(\\?\$?\s*-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?\s*\\?%?)(?:\s+[A-Za-z]|,\s+(?!-?\d)|$)", s)
    return m.group(1).strip() if m else s


def _strip_sentence_end(s: str) -> str:
    s = s.strip()
    # cut "5. Because ..." at the first sentence end, but keep decimals like "3.5"
    m = re.search(r"\.(\s|$)", s)
    if m:
        s = s[: m.start()]
    return s.strip().rstrip(".").strip()


def extract_answer(text: str, *, order: Sequence[str] = EXTRACTION_MODES, boxed: str = "last") -> str | None:
    r"""The final answer found by the first extraction mode in `order` that finds one, else None.

    Modes: ``boxed`` (``\boxed{}``, last or first per `boxed`), ``gsm8k`` (last ``#### x``),
    ``answer_is`` (last "answer is x" / "answer: x", up to the sentence end), ``last_number``.

    >>> extract_answer("3 + 4 = 7. #### 7")
    '7'
    >>> extract_answer("The answer is $1,234. Next question: 5")
    '$1,234'
    >>> extract_answer("It is 12 apples, then -3"), extract_answer("no digits here")
    ('-3', None)
    """
    for mode in order:
        if mode not in EXTRACTION_MODES:
            raise ValueError(f"unknown extraction mode {mode!r}; allowed: {', '.join(EXTRACTION_MODES)}")
        if mode == "boxed":
            found = extract_boxed(text, which=boxed)
        elif mode == "gsm8k":
            hits = _GSM8K_RE.findall(text)
            found = _answer_clause(hits[-1]) if hits else None
        elif mode == "answer_is":
            hits = _ANSWER_IS_RE.findall(text)
            found = _answer_clause(hits[-1]) if hits else None
        else:
            hits = _NUMBER_RE.findall(text)
            found = hits[-1] if hits else None
        if found:
            return found
    return None


def _unwrap_command(s: str, cmd: str) -> str:
    r"""Replace ``\cmd{x}`` by ``x`` (braces matched), e.g. ``\text{ cm}`` -> `` cm``."""
    pat = "\\" + cmd + "{"
    while (i := s.find(pat)) != -1:
        depth, j = 0, i + len(pat) - 1
        while j < len(s):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                break
            j += 1
        if depth != 0:  # unbalanced: drop the command word, keep the rest
            return s.replace(pat, "{")
        s = s[:i] + s[i + len(pat) : j] + s[j + 1 :]
    return s


def normalize_answer(answer: str) -> str:
    r"""A canonical string for an extracted answer (does not decide equivalence on its own).

    >>> normalize_answer(r"\$1,234.")
    '1234'
    >>> normalize_answer(r"5 \text{ dollars}"), normalize_answer(r"\dfrac12"), normalize_answer("50\\%")
    ('5', '\\frac12', '50')
    """
    s = str(answer).strip().replace("\u2212", "-")  # unicode minus sign
    for cmd in ("text", "textbf", "mathrm", "mbox", "textnormal"):
        s = _unwrap_command(s, cmd)
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:left|right)\b", "", s)
    s = re.sub(r"\\[,;:! ]", "", s)  # LaTeX spacing commands
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s)  # degrees
    s = s.replace("\\%", "").replace("%", "")
    s = _THOUSANDS_RE.sub(lambda m: m.group(1).replace(",", ""), s)
    s = s.strip().rstrip(".").strip()
    m = _TRAILING_WORDS_RE.match(s)
    if m and sum(c.isalpha() for c in m.group(2)) >= 2:  # "5 dollars", not "5 x" (a variable)
        s = m.group(1)
    return s.strip()


def parse_number(answer: str) -> tuple[Fraction, bool] | None:
    r"""``(value, exact)`` for a plain number, or None for anything symbolic.

    `exact` is False when a decimal point or exponent was written (compared within a tolerance).

    >>> parse_number(r"-\frac{3}{4}"), parse_number("1,000"), parse_number("x+1")
    ((Fraction(-3, 4), True), (Fraction(1000, 1), True), None)
    """
    s = normalize_answer(answer).replace(" ", "")
    if not s or len(s) > 2000:  # longer digit strings are compared as text/symbolically
        return None
    if _PLAIN_NUMBER_RE.fullmatch(s):
        exponent = re.search(r"[eE]([+-]?\d+)", s)
        if exponent and abs(int(exponent.group(1))) > 1000:  # Fraction("1e999999999") would hang
            return None
        return Fraction(s), not re.search(r"[.eE]", s)
    m = _FRAC_RE.fullmatch(s)
    if m:
        sign, num_b, num_d, den_b, den_d = m.groups()
        num, den = int(num_b or num_d), int(den_b or den_d)
    else:
        m = re.fullmatch(r"([+-]?)(\d+)/([+-]?\d+)", s)
        if not m:
            return None
        sign, num, den = m.group(1), int(m.group(2)), int(m.group(3))
    if den == 0:
        return None
    value = Fraction(num, den)
    return (-value if sign == "-" else value), True


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _symbolic_equal(pred: str, gold: str, timeout: int) -> bool:
    from math_verify import parse, verify  # imported lazily: sympy import costs ~1 s

    t = timeout if _in_main_thread() else None  # signal.alarm only works in the main thread
    gold_parsed = parse("$" + gold + "$", parsing_timeout=t)
    pred_parsed = parse("$" + pred + "$", parsing_timeout=t)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=t))


def math_equal(pred, gold, *, tol: float = 1e-6, percent: bool = False, timeout: int = 5) -> bool:
    r"""Whether an extracted answer `pred` equals the reference `gold`.

    Fast path: if both are plain numbers, integers/fractions compare exactly and decimals within
    ``|p - g| <= tol * max(1, |g|)``. Else math-verify decides (LaTeX, symbolic, sets, intervals),
    with `timeout` seconds per call in the main thread and none elsewhere. With ``percent=True``,
    ``p`` also matches ``g/100`` and ``100 g`` ("50%" vs "0.5"). None or empty never matches.

    >>> math_equal("0.5", r"\frac{1}{2}"), math_equal("1,024", "2^{10}"), math_equal("$5", "5 dollars")
    (True, True, True)
    >>> math_equal("12345678901234567891", "12345678901234567890")
    False
    """
    if pred is None or gold is None:
        return False
    pred_s, gold_s = normalize_answer(str(pred)), normalize_answer(str(gold))
    if not pred_s or not gold_s:
        return False
    p, g = parse_number(pred_s), parse_number(gold_s)
    if p is not None and g is not None:
        targets = [g[0], g[0] / 100, g[0] * 100] if percent else [g[0]]
        if p[1] and g[1]:  # both written as integers/fractions: exact, so huge integers stay distinct
            return p[0] in targets
        return any(abs(p[0] - t) <= Fraction(tol) * max(1, abs(t)) for t in targets)
    if pred_s == gold_s:
        return True
    return _symbolic_equal(pred_s, gold_s, timeout)


def math_accuracy_reward(
    prompts, completions, answer, *, order: Sequence[str] = EXTRACTION_MODES, tol: float = 1e-6, **_
) -> list[float | None]:
    r"""1.0 when the completion's extracted final answer equals the `answer` column, else 0.0.

    Completions may be strings or chat-message lists. A missing gold answer gives None (not
    scorable); a completion with no answer scores 0.0. Bind `order`/`tol` with functools.partial.

    >>> math_accuracy_reward(["q", "q"], [r"so \boxed{\dfrac12}", [{"role": "assistant", "content": "#### 3"}]],
    ...                      answer=["0.5", "4"])
    [1.0, 0.0]
    """
    if len(answer) != len(completions):
        raise ValueError(f"answer has {len(answer)} entries but there are {len(completions)} completions")
    out: list[float | None] = []
    for completion, gold in zip(completions, answer):
        if gold is None or not str(gold).strip():
            out.append(None)
            continue
        pred = extract_answer(completion_text(completion), order=order)
        out.append(1.0 if math_equal(pred, gold, tol=tol) else 0.0)
    return out


def boxed_format_reward(prompts, completions, *, fmt: str = "boxed", **_) -> list[float]:
    r"""1.0 when the completion has exactly one parseable final answer in format `fmt`, else 0.0.

    `fmt` is ``boxed`` (one ``\boxed{}``), ``gsm8k`` (one ``#### x`` line) or ``answer_is``.
    Parseable: a plain number, or something math-verify can parse.

    >>> boxed_format_reward(None, [r"\boxed{2}", r"\boxed{2} \boxed{3}", "2", r"\boxed{}"])
    [1.0, 0.0, 0.0, 0.0]
    """
    patterns = {"boxed": None, "gsm8k": _GSM8K_RE, "answer_is": _ANSWER_IS_RE}
    if fmt not in patterns:
        raise ValueError(f"fmt must be one of {sorted(patterns)}, got {fmt!r}")
    out = []
    for completion in completions:
        text = completion_text(completion)
        if fmt == "boxed":
            hits = _boxed_spans(text)
        else:
            hits = [_answer_clause(h) for h in patterns[fmt].findall(text)]
        out.append(1.0 if len(hits) == 1 and _parseable(hits[0]) else 0.0)
    return out


def _parseable(answer: str) -> bool:
    s = normalize_answer(answer)
    if not s:
        return False
    if parse_number(s) is not None:
        return True
    from math_verify import parse

    parsed = parse("$" + s + "$", parsing_timeout=5 if _in_main_thread() else None)
    return any(not isinstance(x, str) for x in parsed)
