"""A random scored batch for timing learner updates (benchmarks only: no engine, no rewards)."""

from __future__ import annotations

import torch

from covey.rollouts import Rollouts

__all__ = ["random_rollouts"]


def random_rollouts(vocab: int, prompts: int, group: int, tokens: int, *, prompt_tokens: int = 32, seed: int = 0) -> Rollouts:
    """`prompts` x `group` rows of random tokens (ids 5..vocab-1): a shared prompt of `prompt_tokens` per
    group, `tokens` completion tokens each, behaviour log-probs in [-6, -5), advantages +-1."""
    g = torch.Generator().manual_seed(seed)
    n = prompts * group
    heads = [torch.randint(5, vocab, (prompt_tokens,), generator=g) for _ in range(prompts)]
    return Rollouts(prompt_ids=[heads[i // group].clone() for i in range(n)],
                    completion_ids=torch.randint(5, vocab, (n, tokens), generator=g), completion_mask=torch.ones(n, tokens),
                    behaviour_logprobs=-torch.rand(n, tokens, generator=g) - 5.0, group=torch.arange(n) // group,
                    prompt_id=torch.arange(n) // group, advantages=torch.randint(0, 2, (n,), generator=g).float() * 2 - 1,
                    ).validate()  # fmt: skip
