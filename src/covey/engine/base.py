"""The Engine seam: token ids in, sampled token ids and their log-probs out.

The engine knows nothing about chat templates, datasets, groups or rewards; it speaks tokens and
tensors, so a vLLM-backed engine or a remote engine pool can implement the same few methods:

    generate(prompts, n, sampling) -> Generation     n completions per prompt
    load_weights(source, version)                      the learner's weights, tagged with a version
    close()                                            free memory, workers, devices

Engines are built as ``factory(model, tokenizer, **params)`` from config ``engine: {name, ...}``
(registered in `ENGINES`, or an import path). The rollout strategy turns a `Generation` into a
`Rollouts` batch (it alone assigns groups and prompt ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from covey.plugins import PluginRegistry

__all__ = ["ENGINES", "Engine", "Generation", "SamplingParams", "register_engine"]


@dataclass
class SamplingParams:
    """How to sample. `top_k=0`, `top_p=1.0`, `min_p=0.0` disable those filters.

    Empty `stop_token_ids` means the tokenizer's / model's EOS ids (unless `ignore_eos`).

    Per-prompt length limits (a row that reaches its limit finishes with reason "length", exactly
    like one that reaches `max_new_tokens`; rows of other prompts are unaffected):
    prompt_max_new_tokens: one limit per prompt of this `generate` call, in order, each in
                           [1, max_new_tokens]; None = `max_new_tokens` for all. `sample_groups`
                           fills it from the sampler's `Draw.max_new_tokens`.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    greedy: bool = False  # argmax decoding; logprobs are still those of the tempered distribution
    ignore_eos: bool = False  # no default stop tokens (benchmarks); explicit stop_token_ids still stop
    return_entropies: bool = False  # fill Generation.entropies (entropy of the tempered distribution)
    prompt_max_new_tokens: tuple[int, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.prompt_max_new_tokens is not None:
            self.prompt_max_new_tokens = tuple(self.prompt_max_new_tokens)
            bad = [(i, v) for i, v in enumerate(self.prompt_max_new_tokens)
                   if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= self.max_new_tokens]  # fmt: skip
            if bad:
                i, v = bad[0]
                raise ValueError(f"prompt_max_new_tokens[{i}] = {v!r}: each per-prompt limit must be an int in "
                                 f"[1, max_new_tokens={self.max_new_tokens}]")  # fmt: skip


@dataclass
class Generation:
    """What an engine returns for P prompts x n completions: N = P * n rows, prompt p's rows at
    [p*n, (p+1)*n).

    prompt_ids:     list of N 1-D long tensors (the prompt of each row).
    completion_ids: [N, T] long, right-padded with the pad id.
    completion_mask:[N, T] float32, 1.0 on generated tokens.
    logprobs:       [N, T] float32, log-prob of each sampled token under the (tempered) sampling
                    distribution of the weights that produced it; 0 on padding.
    finish_reason:  N strings, "stop" or "length".
    prompt_index:   [N] long, which of the P prompts each row continues.
    entropies:      [N, T] float32 or None (when `SamplingParams.return_entropies`).
    policy_version: [N, T] long or None, the weights version that produced each token.
    """

    prompt_ids: list[Tensor]
    completion_ids: Tensor
    completion_mask: Tensor
    logprobs: Tensor
    finish_reason: list[str]
    prompt_index: Tensor
    entropies: Tensor | None = None
    policy_version: Tensor | None = None

    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    @property
    def lengths(self) -> Tensor:
        """[N] long: generated tokens per row."""
        return self.completion_mask.sum(-1).round().long()


@runtime_checkable
class Engine(Protocol):
    def generate(self, prompts: list[list[int]] | list[Tensor], n: int, sampling: SamplingParams) -> Generation:
        """Sample `n` completions for each prompt (rows of prompt p at [p*n, (p+1)*n))."""
        ...

    def load_weights(self, source: Any, version: int | None = None) -> None:
        """Use the learner's weights (an HF model or a name -> tensor mapping); tokens generated
        afterwards carry `version` in `Generation.policy_version`."""
        ...

    def close(self) -> None:
        """Release what the engine holds (caches, workers, device memory)."""
        ...


def version_tensor(mask: Tensor, version: int) -> Tensor:
    """[N, T] long policy versions for the generated tokens (0 on padding)."""
    return (mask > 0).long() * int(version)


ENGINES = PluginRegistry("engine", Engine, context=("model", "tokenizer"))
register_engine = ENGINES.register
