"""Text comparison for free-form answers: SQuAD-style normalisation and bag-of-tokens F1.

    normalize_text(s) = lower-case, punctuation removed, articles (a, an, the) removed, whitespace collapsed
    token_f1(a, b)    = 2 P R / (P + R) over the multiset of normalised tokens (0 if either is empty)

The SQuAD v1.1 evaluation script's `normalize_answer` / `f1_score`, used by the PS-GRPO set similarity
(`covey.rewards.sets`) and the entity match (`covey.rewards.entity`). ``articles=False`` keeps
"a / an / the" (the PS-GRPO test vector counts them as tokens).
"""

from __future__ import annotations

import re
import string
from collections import Counter

__all__ = ["normalize_text", "token_f1"]

_PUNCT = set(string.punctuation)


def normalize_text(s: str, *, articles: bool = True) -> str:
    """SQuAD's answer normalisation.

    >>> normalize_text("The  Capital, of France!")
    'capital of france'
    """
    s = "".join(ch for ch in str(s).lower() if ch not in _PUNCT)
    if articles:
        s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def token_f1(a: str, b: str, *, articles: bool = True) -> float:
    """Bag-of-tokens F1 of the normalised texts.

    >>> token_f1("paris is the capital", "lyon is the capital", articles=False)
    0.75
    """
    ta, tb = normalize_text(a, articles=articles).split(), normalize_text(b, articles=articles).split()
    if not ta or not tb:
        return 0.0
    common = sum((Counter(ta) & Counter(tb)).values())
    if common == 0:
        return 0.0
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)
