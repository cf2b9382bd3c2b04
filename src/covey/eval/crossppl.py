"""`covey eval --logprob-under MODEL`: how likely another model finds the sampled completions.

The Limits-of-RLVR study (arXiv 2504.13837) measures the perplexity of the RL model's samples under
the base model ("RL's reasoning paths are already in the base distribution"); the paper's analysis
code for it was not read (reconstructed from the paper's description): each completion
text is re-tokenized with the scoring model's tokenizer after that model's own prompt encoding
(`apply_chat`), so the two models need not share a tokenizer, and its per-token negative
log-likelihood under the scoring model (temperature 1) is summed. Per sample: ``nll_under`` (mean
NLL per token) and ``nll_tokens``; summary: ``perplexity = exp(sum NLL / sum tokens)`` over samples.
Re-tokenizing the decoded text is exact for text the tokenizer round-trips; a completion that ends
inside a multi-byte character decodes to U+FFFD and is scored as that text (its token count differs).
"""

from __future__ import annotations

import math

import torch

from covey.learner.logprobs import completion_logprobs
from covey.models import apply_chat

__all__ = ["nll_scorer", "summarize_nll"]


def nll_scorer(model, tokenizer, *, batch: int = 16):
    """A function (items, texts) -> [(sum of token NLLs, tokens)] per completion, under `model`."""
    model.eval()

    def score(items: list[dict], texts: list[str]) -> list[tuple[float, int]]:
        out: list[tuple[float, int]] = []
        for s in range(0, len(texts), batch):
            its, txt = items[s : s + batch], texts[s : s + batch]
            prompts = [torch.tensor(apply_chat(tokenizer, it["prompt"]), dtype=torch.long) for it in its]
            comps = [list(tokenizer.encode(t, add_special_tokens=False)) for t in txt]
            width = max(1, max(len(c) for c in comps))
            ids = torch.tensor([c + [0] * (width - len(c)) for c in comps], dtype=torch.long)
            mask = torch.tensor([[1.0] * len(c) + [0.0] * (width - len(c)) for c in comps])
            with torch.no_grad():
                logp, _ = completion_logprobs(model, prompts, ids, mask)
            out += [(float(-logp[i].sum()), len(c)) for i, c in enumerate(comps)]
        return out

    return score


def summarize_nll(pairs: list[tuple[float, int]]) -> dict[str, float]:
    """Pooled NLL per token and its perplexity over (sum NLL, tokens) pairs; empty completions count 0 tokens.

    >>> summarize_nll([(2.0, 2), (1.0, 0), (4.0, 2)])["nll_per_token"]  # (2 + 4) / 4 tokens
    1.5
    """
    tokens = sum(t for _, t in pairs)
    nll = sum(v for v, t in pairs if t) / tokens if tokens else float("nan")
    return {"nll_per_token": nll, "perplexity": math.exp(nll) if tokens else float("nan"), "tokens": tokens}
