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

What a strategy needs or does is declared on its registry entry as `StrategyCaps`, its ``caps``
class attribute: ``caps = StrategyCaps(engine_protocols=(ForkingEngine,), provides=("tree_path",))``.
A strategy reaches the engine only through the engine protocols it declares there (default
``(Engine,)``; `covey.engine.base`); a strategy that runs another one names it with
``inner=lambda params: (name, params)`` and needs what that one needs too (`strategy_chain`).
`check_engine_protocols` refuses, when the config is read, an engine class that lacks one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from covey.engine.base import ENGINE_PROTOCOLS, ENGINES, Engine, SamplingParams, missing_protocols
from covey.registry import Caps, Entry, Registry, RegistryError
from covey.samplers.base import Draw
from covey.rollouts import Rollouts

__all__ = [
    "STRATEGIES",
    "RolloutContext",
    "RolloutStrategy",
    "StrategyCaps",
    "check_engine_protocols",
    "engine_protocols",
    "flag_of_inner",
    "register_strategy",
    "strategy_chain",
    "wants_reference_engine",
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
                     ``StrategyCaps(needs_reference_engine=True)``; None otherwise.
    max_prompt_tokens: the longest chat-templated prompt the run takes (the model's context minus
                     max_new_tokens, or the task's limit; `covey.samplers.lengths.prompt_token_limit`),
                     None when unknown: a sampler that rewrites prompts (XRPO's seeding) keeps within it.
    objective:       the learner's objective (`covey.learner.objective`): a strategy that evaluates
                     what that objective proposes (the population of an evolution strategy) asks it here.
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
    objective: Any = None


@runtime_checkable
class RolloutStrategy(Protocol):
    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


Features = tuple[str, ...] | Callable[[dict], Any]


class StrategyCaps(Caps):
    """What a rollout strategy needs or does (declared as its `caps`; defaults: none of it).

    engine_protocols:        the engine protocols it calls (`covey.engine.base`), checked against the
                             engine when the config is read; a tuple, or a function of its parameters.
    inner:                   inner(params) -> (name, params): the strategy it runs; what that one
                             needs applies too.
    carries_rollouts:        unfinished rollouts go on in the next step (the async executors refuse
                             or bound it, `covey.runtime.config`).
    trains_carried_tokens:   a carried row trains its earlier tokens (False: they are masked out).
    needs_reference_engine:  it also samples from the frozen reference (`RolloutContext.reference_engine`);
                             a bool, or a function of its parameters (`wants_reference_engine`).
    needs_ray:               it shares rollouts between runs through Ray.
    foreign_rows:            it adds rows another model sampled, whose behaviour log-probs are unknown
                             (no importance correction).
    takes_env:               the run's `env:` section is its `env` parameter (multi-turn episodes);
                             a bool, or a function of its parameters (a wrapper takes the env when
                             the strategy it runs does: `flag_of_inner`).
    env_reward:              its rows are scored by their environment: reward functions and reward
                             shaping do not apply; a bool or a function of its parameters (`episodes`
                             with ``rewards: functions`` hands its rows to the reward functions).
    updates_policy:          False: the run never changes a weight (the learner's update is skipped;
                             Training-Free GRPO learns in its prompt, not in its parameters).
    task:                    the task it rolls out, and only it (an external environment that is both).
    labelled_reward:         the one reward its rows get, from labels in the data (not `rewards:`).
    makes_pairs:             it makes preference pairs: it needs a `preference:` section.
    objective:               the `algo.objective` its rows need (soft tokens, offline rows, a population):
                             another objective is refused when the config is read.
    requires, provides, prefers:  `covey.compat` features, a tuple or a function of its parameters.
    """

    renamed: ClassVar[dict[str, str]] = {"inner_strategy": "inner"}

    engine_protocols: tuple[type, ...] | Callable[[dict], tuple[type, ...]] = (Engine,)
    inner: Callable[[dict], tuple[str, dict]] | None = None
    carries_rollouts: bool = False
    trains_carried_tokens: bool = True
    needs_reference_engine: bool | Callable[[dict], bool] = False
    needs_ray: bool = False
    foreign_rows: bool = False
    takes_env: bool | Callable[[dict], bool] = False
    env_reward: bool | Callable[[dict], bool] = False
    updates_policy: bool = True
    task: str | None = None
    labelled_reward: str | None = None
    makes_pairs: bool = False
    objective: str | None = None
    requires: Features = ()
    provides: Features = ()
    prefers: Features = ()

    def flag(self, name: str, params: Mapping[str, Any]) -> bool:
        """The value of flag `name` (`takes_env`, `env_reward`) for a strategy built with `params`."""
        value = getattr(self, name)
        return bool(value(dict(params)) if callable(value) else value)


STRATEGIES = Registry("rollout strategy", protocol=RolloutStrategy, caps=StrategyCaps)
register_strategy = STRATEGIES.register


def flag_of_inner(inner: Callable[[dict], tuple[str, dict]], name: str) -> Callable[[dict], bool]:
    """A wrapper's flag `name` (`takes_env`, `env_reward`) as the strategy it runs has it
    (`inner(params) -> (name, params)`): e.g. it takes the run's env exactly when its inner one does,
    and hands it on."""

    def value(params: dict) -> bool:
        inner_name, inner_params = inner(params)
        return STRATEGIES.get(inner_name).caps.flag(name, inner_params)

    return value


def inner_with_env(default: str) -> Callable[[dict], tuple[str, dict]]:
    """`inner(params) -> (name, params)` of a wrapper that runs ``params["inner"]`` (`default` when unset)
    with ``inner_params`` and hands the run's env (its own ``env`` parameter) on to it."""

    def inner_of(params: dict) -> tuple[str, dict]:
        inner = dict(params.get("inner_params") or {})
        if "env" in params:
            inner["env"] = params["env"]
        return params.get("inner", default), inner

    return inner_of


def strategy_chain(name: str, params: Mapping[str, Any]) -> list[tuple[str, dict, Entry]]:
    """(name, params, registry entry) of strategy `name` and of each strategy it runs
    (`StrategyCaps.inner`), outermost first."""
    chain = []
    while True:
        entry = STRATEGIES.get(name)
        chain.append((name, dict(params), entry))
        if entry.caps.inner is None:
            return chain
        name, params = entry.caps.inner(dict(params))


def wants_reference_engine(name: str, params: Mapping[str, Any]) -> bool:
    """Whether strategy `name` with `params` samples from the frozen reference (its
    `StrategyCaps.needs_reference_engine`, evaluated for `params` when it is a function)."""
    need = STRATEGIES.get(name).caps.needs_reference_engine
    return bool(need(dict(params)) if callable(need) else need)


def engine_protocols(name: str, params: Mapping[str, Any]) -> tuple[type, ...]:
    """The engine protocols strategy `name` needs with `params`: its own (default `(Engine,)`) and
    those of the strategies it runs, in order."""
    need = tuple(p for _, params_, entry in strategy_chain(name, params) for p in _declared(entry.caps.engine_protocols, params_))
    return tuple(dict.fromkeys(need))


def _declared(protocols, params: dict) -> tuple[type, ...]:
    return tuple(protocols(params) if callable(protocols) and not isinstance(protocols, type) else protocols)


def check_engine_protocols(strategy: str, params: Mapping[str, Any], engine: str) -> None:
    """Raise a one-line `RegistryError` when the engine `engine` (a registered name or import path;
    its class is checked, nothing is built) lacks a protocol that rollout strategy `strategy` needs."""
    need = engine_protocols(strategy, params)
    missing = missing_protocols(ENGINES.get(engine).fn, need)
    if not missing:
        return
    label = repr(strategy) + "".join(f" (wrapping {name!r})" for name, _, _ in strategy_chain(strategy, params)[1:])
    shown = [p for p in need if p is not Engine or p in missing]  # Engine itself only when it is lacking
    wanted = " and ".join(f"{p.__name__} ({ENGINE_PROTOCOLS.get(p, p.__name__)})" for p in shown)
    unknown = "its factory does not annotate the engine class it returns"
    lacks = "; ".join(f"{p.__name__} ({unknown if m == ['?'] else 'no ' + ', '.join(m)})" for p, m in missing.items())
    raise RegistryError(f"rollout.strategy {label} needs an engine with {wanted}; engine {engine!r} does not provide {lacks}")
