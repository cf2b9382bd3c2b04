"""The `PromptSampler` seam: which dataset items each step rolls out, learning from what it saw.

A sampler is built as ``factory(items, seed, **params)`` from config ``sampler: {name, ...params}``
(registered in `SAMPLERS`, or an import path ``package.module:Class``). Per step the trainer calls

    items = sampler.next(B)                       # B prompts to roll out
    sizes = sampler.group_sizes(items, G)         # completions per prompt (default: G each)
    ... rollout, rewards ...
    metrics = sampler.observe(batch)              # scored batch, BEFORE advantages are computed

`observe` sees the scored `Rollouts` (`prompt_id` = item id, `rewards`, `group`, `items`) and may
annotate it for an estimator that reads sampler state (e.g. SPO's baseline in ``batch.extras``).
`state_dict()` / `load_state_dict()` go into the checkpoint through `torch.save`, so tensors and
int keys survive a restart unchanged; a resumed run must draw exactly what an uninterrupted one would.

Three optional hooks (the trainer calls them only when the sampler defines them):

    items, metrics = sampler.before_rollout(items, ctx)     after `next`, before the rollout
    limits = sampler.generation_limits(items)                after `before_rollout`
    metrics = sampler.after_update(batch, policy_logprobs)   after the learner update + weight sync

- `before_rollout(items, ctx)` gets the step's `RolloutContext` (engine, tokenizer, seeded
  `sampling(round)`, `score(batch)`) and returns the items to roll out (a subset, e.g. SELF drops
  prompts its greedy decode already solves) and metrics. No items left: the step is skipped (empty
  batch: no rollout, no `observe`, no update; the step counter, metrics and checkpoint go on).
  Items drawn later by a strategy's refills (`ctx.draw`) do not pass through it.
- `generation_limits(items)` returns ``{item id: max new tokens}`` for some items (MASA's early
  cut-off). The trainer puts it in `SamplingParams.item_max_new_tokens`; `sample_groups` (the
  `group` strategy and the strategies built on it) stops those rows there, with finish reason
  "length". Strategies that call the engine themselves (tree and partial rollouts) ignore it.
- `after_update(batch, policy_logprobs)` runs after the policy was updated on a non-empty `batch`.
  ``policy_logprobs(prompt_ids, completion_ids, completion_mask) -> [N, T]`` are the per-token
  log-probs (tempered like the behaviour log-probs, 0 on padding) of any completions under the
  updated policy: one no-grad forward, micro-batched like the learner (SPO's KL-adaptive forgetting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from covey.registry import Registry
from covey.rollouts import Rollouts

__all__ = ["SAMPLERS", "BaseSampler", "PromptSampler", "register_sampler"]


@runtime_checkable
class PromptSampler(Protocol):
    def next(self, k: int) -> list[dict]:
        """The next `k` items to roll out (a sampler may repeat items)."""
        ...

    def observe(self, batch: Rollouts) -> dict[str, float]:
        """Per-prompt feedback after scoring; returns metrics (``sampler/...``)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class BaseSampler:
    """Defaults for the optional parts: G completions per prompt, no feedback, no state."""

    def __init__(self, items: Sequence[dict], seed: int = 0):
        if len(items) == 0:
            raise ValueError("the prompt source has no items: check the task/dataset and its split")
        self.items, self.seed = items, seed

    def next(self, k: int) -> list[dict]:
        raise NotImplementedError

    def group_sizes(self, items: list[dict], group_size: int) -> list[int]:
        """Completions to sample for each item (samplers like DARS give hard prompts more)."""
        return [group_size] * len(items)

    def observe(self, batch: Rollouts) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


SAMPLERS = Registry("sampler", protocol=PromptSampler, context=("items", "seed"))
register_sampler = SAMPLERS.register
