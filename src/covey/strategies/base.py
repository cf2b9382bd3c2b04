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

A strategy reaches the engine only through the engine protocols it declares as a class attribute,
``engine_protocols = (ForkingEngine,)`` (default ``(Engine,)``; `covey.engine.base`); a strategy
that runs another one names it with a static ``inner_strategy(params) -> (name, params)`` and needs
what that one needs too. `check_engine_protocols` refuses, when the config is read, an engine class
that lacks one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from covey.engine.base import ENGINE_PROTOCOLS, ENGINES, Engine, SamplingParams, missing_protocols
from covey.registry import Registry, RegistryError
from covey.samplers.base import Draw
from covey.rollouts import Rollouts

__all__ = [
    "STRATEGIES",
    "RolloutContext",
    "RolloutStrategy",
    "check_engine_protocols",
    "engine_protocols",
    "register_strategy",
]


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
    reference_engine: an engine over the frozen reference policy, for a strategy that declares
                     ``needs_reference_engine = True`` (XPO's `reference_pairs`); None otherwise.
    max_prompt_tokens: the longest chat-templated prompt the run takes (the model's context minus
                     max_new_tokens, or the task's limit; `covey.samplers.lengths.prompt_token_limit`),
                     None when unknown: a sampler that rewrites prompts (XRPO's seeding) keeps within it.
    """

    engine: Engine
    tokenizer: Any
    draws: list[Draw]
    sampling: Callable[[int], SamplingParams]
    score: Callable[[Rollouts], dict[str, float]]
    draw: Callable[[int], list[Draw]]
    step: int = 0
    policy_version: int = 0
    reference_engine: Engine | None = None
    max_prompt_tokens: int | None = None


@runtime_checkable
class RolloutStrategy(Protocol):
    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


STRATEGIES = Registry("rollout strategy", protocol=RolloutStrategy)
register_strategy = STRATEGIES.register


def engine_protocols(name: str, params: Mapping[str, Any]) -> tuple[type, ...]:
    """The engine protocols strategy `name` needs with `params`: its `engine_protocols` (default
    `(Engine,)`) and those of the strategy it wraps (`inner_strategy(params)`), in order."""
    factory = STRATEGIES.get(name).fn
    need = tuple(getattr(factory, "engine_protocols", (Engine,)))
    inner = getattr(factory, "inner_strategy", None)
    if inner is not None:
        need += engine_protocols(*inner(params))
    return tuple(dict.fromkeys(need))


def check_engine_protocols(strategy: str, params: Mapping[str, Any], engine: str) -> None:
    """Raise a one-line `RegistryError` when the engine `engine` (a registered name or import path;
    its class is checked, nothing is built) lacks a protocol that rollout strategy `strategy` needs."""
    need = engine_protocols(strategy, params)
    missing = missing_protocols(ENGINES.get(engine).fn, need)
    if not missing:
        return
    label, name, ps = repr(strategy), strategy, params
    while (inner := getattr(STRATEGIES.get(name).fn, "inner_strategy", None)) is not None:
        name, ps = inner(ps)
        label += f" (wrapping {name!r})"
    shown = [p for p in need if p is not Engine or p in missing]  # Engine itself only when it is lacking
    wanted = " and ".join(f"{p.__name__} ({ENGINE_PROTOCOLS.get(p, p.__name__)})" for p in shown)
    unknown = "its factory does not annotate the engine class it returns"
    lacks = "; ".join(f"{p.__name__} ({unknown if m == ['?'] else 'no ' + ', '.join(m)})" for p, m in missing.items())
    raise RegistryError(f"rollout.strategy {label} needs an engine with {wanted}; engine {engine!r} does not provide {lacks}")
