"""The sampler seam: which dataset items each step rolls out, learning from what it saw.

A sampler is a subclass of `BaseSampler`, built as ``cls(items, seed, **params)`` from config
``sampler: {name, ...params}`` (registered in `SAMPLERS`, or an import path ``package.module:Class``).
Like verl's ``AbstractSampler``, a sampler must subclass the base class: a class that does not (or
leaves `next` undefined) is refused with a one-line config error before any model loads. The base
class declares every hook with a no-op default, and the trainer calls each of them every step, in
this order:

    items = sampler.next(B)                                  B prompts to roll out
    items, metrics = sampler.before_rollout(items, ctx)      may drop items
    sizes = sampler.group_sizes(items, G)                    completions per item (read by strategies)
    limits = sampler.generation_limits(items)                {item id: max new tokens}
    ... rollout, rewards ...
    metrics = sampler.observe(batch)                         scored batch, BEFORE advantages
    ... advantages, learner update, weight sync ...
    metrics = sampler.after_update(batch, policy_logprobs)   non-empty batches only

and `state_dict()` when it checkpoints. The hooks' contracts are their docstrings below.
`requires` names optional `Rollouts` fields the sampler reads (merged with the algorithm's, so the
engine returns them, e.g. ``("entropies",)``). `state_dict()` / `load_state_dict()` go into the
checkpoint through `torch.save`, so tensors and int keys survive a restart unchanged; a resumed run
must draw exactly what an uninterrupted one would.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import Tensor

from covey.plugins import PluginError, PluginRegistry
from covey.rollouts import Rollouts

__all__ = ["SAMPLERS", "BaseSampler", "PolicyLogprobs", "register_sampler"]

PolicyLogprobs = Callable[[list[Tensor], Tensor, Tensor], Tensor]


class BaseSampler(ABC):
    """The sampler contract: `next` is required; every other hook has a no-op default."""

    requires: tuple[str, ...] = ()
    """Optional `Rollouts` fields this sampler reads (e.g. ``("entropies",)``)."""

    def __init__(self, items: Sequence[dict], seed: int = 0):
        if len(items) == 0:
            raise ValueError("the prompt source has no items: check the task/dataset and its split")
        self.items, self.seed = items, seed

    @abstractmethod
    def next(self, k: int) -> list[dict]:
        """The next `k` items to roll out (a sampler may repeat items). Also called by a rollout
        strategy for refills (`ctx.draw`)."""

    def before_rollout(self, items: list[dict], ctx) -> tuple[list[dict], dict[str, float]]:
        """After `next`, before the rollout: the items to roll out (a subset, e.g. SELF drops prompts
        its greedy decode already solves) and metrics. `ctx` is the step's `RolloutContext` (engine,
        tokenizer, seeded `sampling(round)`, `score(batch)`). No items left: the step is skipped
        (no rollout, no `observe`, no update; the step counter, metrics and checkpoint go on).
        Items drawn later by a strategy's refills do not pass through it. Default: all items."""
        return items, {}

    def group_sizes(self, items: list[dict], group_size: int) -> list[int]:
        """Completions to sample for each item (`group_size` = the run's G). Default: G each."""
        return [group_size] * len(items)

    def generation_limits(self, items: list[dict]) -> dict[int, int]:
        """{item id: max new tokens} for some items (MASA's early cut-off): `sample_groups` stops
        those rows there (finish reason "length"); strategies that call the engine themselves
        (tree, partial rollouts) ignore it. Default: no limits."""
        return {}

    def observe(self, batch: Rollouts) -> dict[str, float]:
        """Per-prompt feedback on the scored batch (`prompt_id` = item id, `rewards`, `group`,
        `items`), before advantages are computed; returns metrics (``sampler/<name>/...``).
        Default: nothing."""
        return {}

    def after_update(self, batch: Rollouts, policy_logprobs: PolicyLogprobs) -> dict[str, float]:
        """After the policy was updated on a non-empty `batch` and the engine synced.
        ``policy_logprobs(prompt_ids, completion_ids, completion_mask) -> [N, T]`` are the per-token
        log-probs (tempered like the behaviour log-probs, 0 on padding) of any completions under the
        updated policy: one no-grad forward, micro-batched like the learner (SPO's KL-adaptive
        forgetting). Returns metrics. Default: nothing."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What the checkpoint keeps (through `torch.save`). Default: nothing."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`'s output. Default: nothing."""


class _SamplerRegistry(PluginRegistry):
    """`PluginRegistry` that also refuses, at config time, a class that is not a complete `BaseSampler`."""

    def check_params(self, name: str, params: Mapping[str, Any]) -> None:
        factory = self.get(name)
        if inspect.isclass(factory):
            if not issubclass(factory, BaseSampler):
                raise PluginError(f"sampler {name!r}: {factory.__name__} must subclass covey.samplers.BaseSampler "
                                  "(it declares every hook the trainer calls)")  # fmt: skip
            missing = sorted(getattr(factory, "__abstractmethods__", ()))
            if missing:
                raise PluginError(f"sampler {name!r}: {factory.__name__} does not define {', '.join(missing)}")
        super().check_params(name, params)


SAMPLERS = _SamplerRegistry("sampler", BaseSampler, context=("items", "seed"))
register_sampler = SAMPLERS.register
