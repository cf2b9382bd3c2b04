"""The Engine protocol: token ids in, sampled token ids and their log-probs out.

The engine knows nothing about chat templates, datasets or rewards; it speaks tokens and tensors, so
a vLLM-backed engine or a remote engine pool can implement the same two methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from covey.rollouts import Rollouts

__all__ = ["Engine", "SamplingParams"]


@dataclass
class SamplingParams:
    """How to sample. `top_k=0`, `top_p=1.0`, `min_p=0.0` disable those filters.

    Empty `stop_token_ids` means the tokenizer's / model's EOS ids (unless `ignore_eos`).
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
    return_entropies: bool = False  # fill Rollouts.entropies (entropy of the tempered distribution)
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    def generate(self, prompts: list[list[int]] | list[Tensor], n: int, sampling: SamplingParams) -> Rollouts:
        """Sample `n` completions for each prompt.

        Returns a `Rollouts` with N = len(prompts) * n rows, rows of prompt p at [p*n, (p+1)*n),
        `group` = `prompt_id` = p, completion ids, mask, behaviour log-probs of the sampled tokens
        (under the tempered distribution) and `finish_reason` ("stop" or "length").
        """
        ...

    def update_weights(self, source: Any) -> None:
        """Use the learner's current weights (a model or a state dict). Free when shared."""
        ...
