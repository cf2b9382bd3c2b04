"""Sampling a step's draws as groups through an engine (chat templates in, a `Rollouts` batch out) and
decoding completions back to text: what every rollout strategy and a sampler that looks ahead
(`self`'s greedy check) share. It lives beside the `Draw` it consumes.
"""

from __future__ import annotations

import dataclasses

import torch

from covey.engine.base import Engine, SamplingParams
from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.samplers.base import Draw

__all__ = ["completion_texts", "sample_groups", "sample_groups_greedy_first"]


def sample_groups(engine: Engine, tokenizer, draws: list[Draw], sampling: SamplingParams) -> Rollouts:
    """`d.n` completions for each draw's item, one group per draw.

    Rows are ordered draw by draw; `group` = position in `draws`; unequal sizes are generated in one
    engine call per distinct size. A draw's `max_new_tokens` (capped at `sampling.max_new_tokens`)
    becomes its prompt's `prompt_max_new_tokens`: its rows stop there (finish reason "length").
    """
    if not draws:
        raise ValueError("sample_groups needs at least one draw")
    items, sizes = [d.item for d in draws], [d.n for d in draws]
    prompts = [apply_chat(tokenizer, item["prompt"]) for item in items]
    parts: dict[int, Rollouts] = {}
    for n in sorted(set(sizes)):
        idx = [i for i, s in enumerate(sizes) if s == n]
        caps = [draws[i].max_new_tokens for i in idx]
        limits = tuple(min(c or sampling.max_new_tokens, sampling.max_new_tokens) for c in caps) if any(caps) else None
        call = dataclasses.replace(sampling, prompt_max_new_tokens=limits) if limits is not None else sampling
        gen = engine.generate([prompts[i] for i in idx], n, call)
        index = torch.tensor(idx, dtype=torch.long)[gen.prompt_index]
        parts[n] = Rollouts.from_generation(gen, group=index, items=[items[i] for i in index.tolist()])
    batch = parts[sizes[0]] if len(parts) == 1 else Rollouts.concat(list(parts.values()))
    if len(parts) > 1:
        batch = batch.select(torch.argsort(batch.group, stable=True))
    return batch


def sample_groups_greedy_first(engine: Engine, tokenizer, draws: list[Draw], sampling: SamplingParams) -> Rollouts:
    """As `sample_groups`, but the first row of every group of two or more is decoded greedily (argmax;
    its behaviour log-probs are still those of the tempered distribution) and the others are sampled.
    ArenaRL's rollout (Alibaba-NLP/qqr @ 8653a9abd77549459eafedfbece638df4460faf5,
    `qqr/rollout/agent_rollout.py`: "Enforce greedy decoding for the first response" when
    n_samples_per_prompt > 1): its anchor-seeded tournaments judge the group against that row."""
    first = [i for i, d in enumerate(draws) if d.n > 1]
    rest = sample_groups(engine, tokenizer, [dataclasses.replace(d, n=d.n - (d.n > 1)) for d in draws], sampling)
    if not first:
        return rest
    greedy = sample_groups(engine, tokenizer, [dataclasses.replace(draws[i], n=1) for i in first],
                           dataclasses.replace(sampling, greedy=True))  # fmt: skip
    greedy.group = torch.tensor(first, dtype=torch.long)[greedy.group]  # back to positions in `draws`
    batch = Rollouts.concat([greedy, rest])
    return batch.select(torch.argsort(batch.group, stable=True))  # each group: its greedy row first


def completion_texts(tokenizer, batch) -> list[str]:
    """Decoded completions (padding and special tokens dropped)."""
    lengths = batch.lengths.tolist()
    return tokenizer.batch_decode(
        [row[:n].tolist() for row, n in zip(batch.completion_ids, lengths)], skip_special_tokens=True
    )
