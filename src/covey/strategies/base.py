"""The `RolloutStrategy` seam: turning a step's items into a `Rollouts` batch through an Engine.

A strategy is built as ``factory(**params)`` from config ``rollout.strategy: {name, ...params}``
(registered in `STRATEGIES`, or an import path). Per step the trainer calls

    batch, metrics = strategy.rollout(items, ctx)

and the strategy alone decides how completions are drawn (i.i.d. groups, trees, carried partial
rollouts, filtered refills). `items` are the step's prompts, ``[d.item for d in ctx.draws]``: each
`Draw` (covey.samplers.base) also says how many completions the sampler asks for (`d.n`, the group
size) and an optional cap on new tokens (`d.max_new_tokens`, applied by `sample_groups`). It must
return a batch whose `group` ids are unique per group, whose `items` hold the dataset item of every
row and whose `prompt_id` is that item's id. It may score
the batch itself through `ctx.score` (a filter needs the rewards); otherwise the trainer scores it.
State that must survive a restart (a carried buffer) goes through `state_dict()` into the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from covey.engine.base import Engine, SamplingParams
from covey.plugins import PluginRegistry
from covey.samplers.base import Draw
from covey.rollouts import Rollouts

__all__ = ["STRATEGIES", "RolloutContext", "RolloutStrategy", "register_strategy"]


@dataclass
class RolloutContext:
    """What a strategy may use during one step.

    engine:          generates token ids (`Engine`).
    tokenizer:       for chat templates and decoding.
    draws:           the step's `Draw`s, aligned with the `items` given to `rollout` (item, group
                     size `n`, optional `max_new_tokens`), as the sampler chose them.
    sampling:        `sampling(round) -> SamplingParams` seeded by (run seed, step, round): a strategy
                     that calls the engine several times in a step uses round 0, 1, 2, ...
    score:           `score(batch) -> metrics` fills `batch.rewards` (reward functions + shaping).
    draw:            `draw(k) -> [Draw]` asks the sampler for more prompts (refills).
    step:            the training step being collected (0-based).
    policy_version:  version of the weights the engine holds now.
    """

    engine: Engine
    tokenizer: Any
    draws: list[Draw]
    sampling: Callable[[int], SamplingParams]
    score: Callable[[Rollouts], dict[str, float]]
    draw: Callable[[int], list[Draw]]
    step: int = 0
    policy_version: int = 0


@runtime_checkable
class RolloutStrategy(Protocol):
    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


STRATEGIES = PluginRegistry("rollout strategy", RolloutStrategy, context=())
register_strategy = STRATEGIES.register
