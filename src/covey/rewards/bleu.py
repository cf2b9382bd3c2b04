"""BLEU against reference answers as a reward (BLEUBERI).

"BLEUBERI: BLEU is a surprisingly effective reward for instruction following" (lilakk/BLEUBERI,
`training/dataset.py::bleu_reward_func`; arXiv id not checked). Their reward is
HF `evaluate`'s "bleu" with ``smooth=True``: the tensorflow/nmt ``compute_bleu`` formula over 13a
tokens. sacrebleu supplies the 13a tokenizer and n-gram counting; the formula is written here because
sacrebleu's own smoothing and brevity penalty differ:

    p_n = (m_n + 1) / (c_n + 1)      (smooth; m_n clipped n-gram matches, c_n hypothesis n-grams)
    p_n = m_n / c_n                   (no smoothing; 0 when c_n = 0)
    BLEU = BP * exp(mean_n log p_n)   (0 if any p_n = 0),  n = 1..max_order (4)
    BP = 1 if h > r else exp(1 - r / h),  h = hypothesis length, r = SHORTEST reference length

Clipping takes each n-gram's maximum count over the references. sacrebleu instead adds k only for
n > 1 and uses the closest reference length; with ``smooth=False`` and one reference both agree.

`prs_bleu_provisional`: PRS's length-aware BLEU for short-form answers ("Enhancing Agentic RL with Progressive
Reward Shaping and Value-based Sampling Policy Optimization", arXiv 2512.07478; the abstract names "a length-aware
BLEU to fairly score concise answers", its formula is not released: RECONSTRUCTED). Plain BLEU-4 scores a correct
one-word answer 0 unsmoothed, and smoothing gives a wrong one-word answer (1/2)^(1/4) = 0.84; here the n-gram orders
are those both texts can have:

    N = min(max_order, h, r)          h = hypothesis length, r = shortest reference length
    BLEU_la = BP * exp(mean_{n <= N} log p_n),   p_n = m_n / c_n (unsmoothed; 0 if any p_n = 0)
"""

from __future__ import annotations

import math
from collections import Counter

from sacrebleu.metrics.helpers import extract_all_word_ngrams
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["BleuReward", "PRSBleu", "bleu_score"]

_TOKENIZE = Tokenizer13a()


def bleu_score(hypothesis: str, references: list[str], *, max_order: int = 4, smooth: bool = True,
               length_aware: bool = False) -> float:  # fmt: skip
    """Sentence BLEU in [0, 1] of `hypothesis` against one or more `references` (formula above); `length_aware`:
    the orders n <= min(max_order, h, r) only (PRS's length-aware BLEU, module docstring).

    >>> bleu_score("the cat sat on the mat", ["the cat sat on the mat"])
    1.0
    >>> round(bleu_score("the cat", ["the cat sat on the mat"]), 4)  # p = 3/3, 2/2, 1/1, 1/1; BP = e^(1-6/2)
    0.1353
    """
    hyp = _TOKENIZE(hypothesis.strip())
    refs = [_TOKENIZE(r.strip()) for r in references]
    hyp_counts, hyp_len = extract_all_word_ngrams(hyp, 1, max_order)
    if hyp_len == 0 or not refs:
        return 0.0
    merged: Counter = Counter()
    ref_lens = []
    for ref in refs:
        counts, n = extract_all_word_ngrams(ref, 1, max_order)
        merged |= counts  # max count of each n-gram over the references
        ref_lens.append(n)
    order = min(max_order, hyp_len, min(ref_lens)) if length_aware else max_order
    if order == 0:
        return 0.0
    matches = [0] * max_order
    for ngram, c in (hyp_counts & merged).items():
        matches[len(ngram) - 1] += c
    precisions = []
    for i in range(order):
        possible = max(0, hyp_len - i)
        if smooth:
            precisions.append((matches[i] + 1.0) / (possible + 1.0))
        else:
            precisions.append(matches[i] / possible if possible else 0.0)
    if min(precisions) <= 0:
        return 0.0
    geo_mean = math.exp(sum(math.log(p) for p in precisions) / order)
    ratio = hyp_len / max(1, min(ref_lens))
    bp = 1.0 if ratio > 1.0 else math.exp(1.0 - 1.0 / ratio)
    return geo_mean * bp


def _answer_part(text: str) -> str:
    """The text after ``<answer>`` (up to ``</answer>``) when the completion uses that format."""
    if "<answer>" in text:
        text = text.rsplit("<answer>", 1)[1]
        text = text.split("</answer>", 1)[0]
    return text


@register_reward("bleu")
class BleuReward:
    """BLEU of each completion against its references (a column of str or list of str).

    Empty or whitespace-only answers score 0.0; a sample without references scores None (not
    scorable). With `answer_tag` (default), a completion containing ``<answer>`` is scored on the
    text after it, as BLEUBERI does for reasoning formats.

    >>> BleuReward()(prompts=None, completions=["<think>hm</think><answer>the cat sat on the mat</answer>", " "],
    ...              references=[["the cat sat on the mat", "a cat sat"], "the cat"])
    [1.0, 0.0]
    """

    length_aware = False

    def __init__(self, column: str = "references", max_order: int = 4, smooth: bool = True, answer_tag: bool = True):
        if max_order < 1:
            raise ValueError(f"BleuReward: max_order must be >= 1, got {max_order}")
        self.column, self.max_order, self.smooth, self.answer_tag = column, max_order, smooth, answer_tag

    def __call__(self, prompts, completions, **columns) -> list[float | None]:
        if self.column not in columns:
            raise ValueError(f"BleuReward needs a {self.column!r} column; columns given: {sorted(columns)}")
        out: list[float | None] = []
        for c, refs in zip(completions, columns[self.column]):
            if refs is None or (not isinstance(refs, str) and len(refs) == 0):
                out.append(None)
                continue
            refs = [refs] if isinstance(refs, str) else [str(r) for r in refs]
            text = completion_text(c)
            if self.answer_tag:
                text = _answer_part(text)
            out.append(0.0 if not text.strip() else bleu_score(text, refs, max_order=self.max_order, smooth=self.smooth,
                                                               length_aware=self.length_aware))  # fmt: skip
        return out


@register_reward("prs_bleu_provisional")
class PRSBleu(BleuReward):
    """PRS's length-aware BLEU (module docstring): unsmoothed, orders up to the shorter text's length.

    >>> PRSBleu()(prompts=None, completions=["Paris", "London", "the city of Paris"], references=[["Paris"]] * 3)
    [1.0, 0.0, 0.25]
    """

    length_aware = True

    def __init__(self, column: str = "references", max_order: int = 4, answer_tag: bool = True):
        super().__init__(column, max_order, smooth=False, answer_tag=answer_tag)
