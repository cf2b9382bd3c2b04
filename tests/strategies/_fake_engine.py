"""A scripted engine and a character tokenizer for strategy tests: each prompt's completions come from a
rule on the prompt's text, log-probs are constants, `score` gives -1 per token (`ScoringEngine`)."""

from __future__ import annotations

import torch

from covey.engine.base import Generation


class CharTok:
    """One token per character (id = ord + 10), pad 0; plain-text prompts only."""

    pad_token_id, eos_token_id = 0, 2

    def encode(self, text, add_special_tokens=False):
        return [ord(c) + 10 for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i - 10) for i in ids if i >= 10)

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r) for r in rows]

    def convert_ids_to_tokens(self, ids):
        return [self.decode([i]) for i in ids]


class ScriptedEngine:
    """`rule(prompt_text, k) -> completion text` for the k-th completion of a prompt."""

    pad_token_id, version = 0, 0

    def __init__(self, rule, behaviour_logprob: float = -0.5, scored_logprob: float = -1.0):
        self.rule, self.tok, self.lp, self.scored = rule, CharTok(), behaviour_logprob, scored_logprob
        self.prompts_seen: list[str] = []

    def generate(self, prompts, n, sampling):
        texts, index = [], []
        for p_i, p in enumerate(prompts):
            text = self.tok.decode(list(p))
            self.prompts_seen.append(text)
            for k in range(n):
                texts.append(self.rule(text, k)[: sampling.max_new_tokens])
                index.append(p_i)
        t = max(1, max(len(x) for x in texts))
        ids = torch.zeros(len(texts), t, dtype=torch.long)
        mask = torch.zeros(len(texts), t)
        for i, x in enumerate(texts):
            if x:
                ids[i, : len(x)] = torch.tensor(self.tok.encode(x))
                mask[i, : len(x)] = 1.0
        return Generation(prompt_ids=[torch.tensor(list(prompts[i]), dtype=torch.long) for i in index], completion_ids=ids,
                          completion_mask=mask, logprobs=self.lp * mask, finish_reason=["stop"] * len(texts),
                          prompt_index=torch.tensor(index))  # fmt: skip

    def score(self, prompts, completions, *, temperature=1.0, top_k=0):
        return [(torch.full((len(c),), self.scored), None) for c in completions]

    def load_weights(self, source, version=None):
        pass

    def close(self):
        pass


def exact_score(batch):
    """The `ctx.score` of these tests: 1.0 when the completion text equals the item's answer."""
    tok = CharTok()
    texts = tok.batch_decode([r[: int(m.sum())].tolist() for r, m in zip(batch.completion_ids, batch.completion_mask)])
    batch.rewards = torch.tensor([[float(t == it["answer"])] for t, it in zip(texts, batch.items)])
    batch.reward_names, batch.reward_weights = ("accuracy",), torch.ones(1)
    return {"accuracy/mean": float(batch.rewards.mean())}
