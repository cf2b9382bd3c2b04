"""Rewards over a set of prompts: completions compared with the completions of the other prompts of the
same set (paraphrases, prompt variants). Group-wise with ``group_key`` = the set column, so the runner
never splits a set across calls; advantages still use ``group`` (one prompt's completions).

`ps_grpo` -- group similarity across a paraphrase set (Con-RAG, arXiv 2510.04392). Reconstructed: no
released code was found (searched 2026-11-24); the rule is the spec's reading of the abstract:

    o_{i,j}: completion j of paraphrase i (i = the prompt's `group` id inside the set)
    exact (samples: null):  r_{i,j} = mean_{i' != i, j'} sim(o_{i,j}, o_{i',j'})
    samples: m              r_{i,j} = mean over m draws without replacement from the other paraphrases'
                            completions (seeded by seed, set id, i, j and the completion text)
    a set with one paraphrase: no other completions -> None (alone: none, the reward does not apply) or 0.0
    sim: token_f1 (bag-of-tokens F1 of lower-cased tokens, punctuation dropped; `articles: true` also drops
         a / an / the as SQuAD does) | bleu (covey's sentence BLEU, the other completion as reference)

`consistency` -- stability over prompt variants (recommendations, arXiv 2512.12858). Reconstructed: the
paper's entropy-based rewards are not read (abstract only; this is a design):

    items(c)       = the recommended items of completion c: `item_regex` matches (group 1 if it has one),
                     else the text inside the last <answer>...</answer> (or the whole text) split at commas,
                     semicolons and newlines; normalised (lower-case, punctuation dropped), duplicates dropped
    freq(x)        = #completions of the set recommending x / |set|
    stability_c    = mean_{x in items(c)} freq(x)       (0 for a completion with no item)
    helpfulness_c  = min(|items(c)|, k_target) / k_target
    reward_c       = stability_weight * stability_c + helpfulness_weight * helpfulness_c
    metric set_entropy = -sum_x p(x) log p(x), p(x) = count(x) / sum of counts    (lower = more consistent)
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter

from covey.rewards._scoring import RewardOutput
from covey.rewards.bleu import bleu_score
from covey.rewards.group import iter_units
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward
from covey.rewards.text import normalize_text, token_f1

__all__ = ["ConsistencyReward", "PsGrpoReward", "extract_items", "set_entropy"]


def _need(columns: dict, name: str, reward: str):
    col = columns.get(name)
    if col is None:
        raise ValueError(f"{reward} needs the {name!r} column (its sets); the batch has {sorted(columns)}")
    return col


@register_reward("ps_grpo")
class PsGrpoReward:
    """Similarity of each completion to the completions of the other paraphrases of its set (module docstring).

    set_column: the item column naming the paraphrase set (default paraphrase_set).
    similarity: token_f1 | bleu;  articles: drop a / an / the in token_f1 (SQuAD)
    samples:    null = the exact mean; m = m seeded draws per completion;  seed
    alone:      none | zero -- the reward of a set with a single paraphrase
    """

    group_aware = True

    def __init__(self, set_column: str = "paraphrase_set", similarity: str = "token_f1", samples: int | None = None,
                 seed: int = 0, alone: str = "none", articles: bool = False):
        if similarity not in ("token_f1", "bleu"):
            raise ValueError(f"ps_grpo: similarity must be token_f1 or bleu, got {similarity!r}")
        if samples is not None and int(samples) < 1:
            raise ValueError(f"ps_grpo: samples must be >= 1 or null (exact), got {samples}")
        if alone not in ("none", "zero"):
            raise ValueError(f"ps_grpo: alone must be none or zero, got {alone!r}")
        self.group_key, self.similarity, self.seed, self.alone = set_column, similarity, int(seed), alone
        self.samples = None if samples is None else int(samples)
        self.articles = bool(articles)
        self.__name__ = "ps_grpo"

    def sim(self, a: str, b: str) -> float:
        return token_f1(a, b, articles=self.articles) if self.similarity == "token_f1" else bleu_score(a, [b])

    def __call__(self, prompts, completions, group=None, **columns) -> RewardOutput:
        sets = _need(columns, self.group_key, "ps_grpo")
        if group is None:
            raise ValueError("ps_grpo needs the 'group' column (which paraphrase each completion answers)")
        texts = [completion_text(c) for c in completions]
        scores: list[float | None] = [None] * len(texts)
        compared = []
        for set_id, idx in iter_units(sets).items():
            for i in idx:
                others = [j for j in idx if group[j] != group[i]]
                if not others:
                    scores[i] = None if self.alone == "none" else 0.0
                    continue
                if self.samples is not None and self.samples < len(others):
                    key = f"{self.seed}/{set_id}/{group[i]}/{i - idx[0]}/{texts[i]}".encode()
                    rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
                    others = rng.sample(others, self.samples)
                scores[i] = sum(self.sim(texts[i], texts[j]) for j in others) / len(others)
                compared.append(float(len(others)))
        return RewardOutput(scores, {"compared": compared} if compared else {})


_SPLIT = re.compile(r"[,;\n]")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def extract_items(text: str, item_regex: str | None = None) -> list[str]:
    """The normalised, de-duplicated items a completion recommends (module docstring).

    >>> extract_items("I suggest <answer>Apple, banana; apple</answer>")
    ['apple', 'banana']
    """
    if item_regex:
        found = [m.group(1) if m.groups() else m.group(0) for m in re.finditer(item_regex, text)]
    else:
        answers = _ANSWER.findall(text)
        found = _SPLIT.split(answers[-1] if answers else text)
    return list(dict.fromkeys(x for x in (normalize_text(f, articles=False) for f in found) if x))


def set_entropy(item_lists: list[list[str]]) -> float:
    """-sum p log p of the items' share of all recommendations in a set (nats; 0 for no items)."""
    counts = Counter(x for items in item_lists for x in items)
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values()) if total else 0.0


@register_reward("consistency")
class ConsistencyReward:
    """Agreement of each completion's recommended items with the other completions of its variant set.

    set_column: the item column naming the variant set (default variant_set).
    item_regex: how to find items (default: split the <answer> text at , ; and newlines).
    k_target, stability_weight (0.5), helpfulness_weight (0.5): the reward (module docstring).
    """

    group_aware = True

    def __init__(self, set_column: str = "variant_set", item_regex: str | None = None, k_target: int = 3,
                 stability_weight: float = 0.5, helpfulness_weight: float = 0.5):
        if int(k_target) < 1:
            raise ValueError(f"consistency: k_target must be >= 1, got {k_target}")
        if item_regex is not None:
            try:
                re.compile(item_regex)
            except re.error as e:
                raise ValueError(f"consistency: item_regex does not compile ({e})") from None
        self.group_key, self.item_regex, self.k_target = set_column, item_regex, int(k_target)
        self.w_s, self.w_h = float(stability_weight), float(helpfulness_weight)
        self.__name__ = "consistency"

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        sets = _need(columns, self.group_key, "consistency")
        items = [extract_items(completion_text(c), self.item_regex) for c in completions]
        scores = [0.0] * len(items)
        entropies = []
        for idx in iter_units(sets).values():
            freq = Counter(x for i in idx for x in items[i])
            for i in idx:
                stab = sum(freq[x] for x in items[i]) / len(idx) / len(items[i]) if items[i] else 0.0
                helpful = min(len(items[i]), self.k_target) / self.k_target
                scores[i] = self.w_s * stab + self.w_h * helpful
            entropies.extend([set_entropy([items[i] for i in idx])] * len(idx))
        return RewardOutput(scores, {"set_entropy": entropies, "items": [float(len(x)) for x in items]})
