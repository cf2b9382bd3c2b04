"""The sampler seam: which dataset items each step rolls out, learning from what it saw.

A sampler is a subclass of `BaseSampler`, built as ``cls(items, seed, **params)`` from config
``sampler: {name, ...params}`` (registered in `SAMPLERS`, or an import path ``package.module:Class``).
Like verl's ``AbstractSampler``, a sampler must subclass the base class: a class that does not (or
leaves `next(k, group_size)` undefined) is refused with a one-line config error before any model loads. The base
class declares every hook with a no-op default, and the trainer calls each of them every step, in
this order:

    draws = sampler.next(B, G)                               B prompts to roll out, as `Draw`s
    draws, metrics = sampler.before_rollout(draws, ctx)      may drop draws
    ... rollout (the strategy reads ctx.draws), rewards ...
    feedback = sampler.observe(batch)                        scored batch, BEFORE advantages
    apply_feedback(batch, feedback)                          the trainer's gate (covey.samplers._sampling)
    ... advantages, learner update, weight sync ...
    metrics = sampler.after_update(batch, policy_logprobs)   non-empty batches only

and `state_dict()` when it checkpoints. The hooks' contracts are their docstrings below.
A `Draw` is one prompt to roll out: its dataset item, how many completions (the group size, which
a sampler may vary per prompt: DARS-like allocation in XRPO, GDRO, DRIVE, SPO) and an optional
cap on new tokens for its rows (MASA's early cut-off). The trainer hands the step's draws to the
rollout strategy in `RolloutContext.draws`; refills a strategy asks for (`ctx.draw(k)`) are
`next(k, G)` too. `observe` only looks: it returns a `Feedback` record (metrics, and which rows and
tokens stay in the loss, which rows' rewards are zeroed) and the trainer applies it, as prime-rl
splits a buffer that observes from a gate that admits; the one thing `observe` may write into the
batch is a declared `Rollouts` field for an estimator that reads sampler state (SPO's
baseline). `requires` names optional `Rollouts` fields the sampler reads (merged with the
algorithm's, so the engine returns them, e.g. ``("entropies",)``). `state_dict()` /
`load_state_dict()` go into the checkpoint through `torch.save`, so tensors and int keys survive a
restart unchanged; a resumed run must draw exactly what an uninterrupted one would.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from covey.registry import Registry, RegistryError
from covey.rollouts import Rollouts

__all__ = ["SAMPLERS", "BaseSampler", "Draw", "Feedback", "PolicyLogprobs", "register_sampler"]

PolicyLogprobs = Callable[[list[Tensor], Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Draw:
    """One prompt to roll out this step.

    item:            the dataset item (its ``id``, ``prompt`` and columns; a sampler may hand a
                     modified copy, e.g. XRPO's seeded prompt, keeping the id).
    n:               completions to sample for it (its group size), >= 1.
    max_new_tokens:  cap on new tokens for its rows, >= 1 (None: the run's `sampling.max_new_tokens`;
                     larger values are capped there). `sample_groups` applies it (finish reason
                     "length"); strategies that call the engine themselves (tree, partial
                     rollouts) do not.
    """

    item: dict
    n: int
    max_new_tokens: int | None = None

    def __post_init__(self):
        if not isinstance(self.item, dict):
            raise ValueError(f"Draw.item must be a dataset item (a dict), got {type(self.item).__name__}")
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"Draw of item {self.item.get('id')!r}: n = {self.n!r}, the completions to sample must be an int >= 1")
        m = self.max_new_tokens
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 1):
            raise ValueError(f"Draw of item {self.item.get('id')!r}: max_new_tokens = {m!r} must be None or an int >= 1")


@dataclass(frozen=True)
class Feedback:
    """What `observe` hands back; the trainer applies it (`covey.samplers._sampling.apply_feedback`)
    before advantages are computed.

    metrics:       ``sampler/<name>/...`` values to log.
    keep_rows:     [N] bool or None: rows where False leave the policy loss (their completion mask is
                   zeroed; the estimator still sees their rewards).
    keep_tokens:   [N, T] bool or None: tokens where False leave the policy loss.
    zero_rewards:  [N] bool or None: rows whose every reward column is set to 0 (MASA's cut-off).
    """

    metrics: dict[str, float] = field(default_factory=dict)
    keep_rows: Tensor | None = None
    keep_tokens: Tensor | None = None
    zero_rewards: Tensor | None = None


class BaseSampler(ABC):
    """The sampler contract: `next` is required; every other hook has a no-op default."""

    requires: tuple[str, ...] = ()
    """Optional `Rollouts` fields this sampler reads (e.g. ``("entropies",)``), and `covey.compat`
    features it needs ("!single_rows": it cannot work with groups of one row)."""
    provides: tuple[str, ...] | Callable[[dict], Any] = ()
    """`covey.compat` features its batches have: a tuple, or a function of its parameters."""
    prefers: tuple[str, ...] = ()
    """`covey.compat` features it works best with (a warning when missing)."""

    def __init__(self, items: Sequence[dict], seed: int = 0):
        if len(items) == 0:
            raise ValueError("the prompt source has no items: check the task/dataset and its split")
        self.items, self.seed = items, seed

    @abstractmethod
    def next(self, k: int, group_size: int) -> list[Draw]:
        """The next `k` prompts to roll out (a sampler may repeat items), each with its group size
        (`group_size` = the run's G: ``rollout.group_size`` + the algorithm's extra) and optional
        generation cap. Also called by a rollout strategy for refills (`ctx.draw(k)`)."""

    def before_rollout(self, draws: list[Draw], ctx) -> tuple[list[Draw], dict[str, float]]:
        """After `next`, before the rollout: the draws to roll out (a subset, e.g. SELF drops prompts
        its greedy decode already solves) and metrics. `ctx` is the step's `RolloutContext` (engine,
        tokenizer, seeded `sampling(round)`, `score(batch)`). No draws left: the step is skipped
        (no rollout, no `observe`, no update; the step counter, metrics and checkpoint go on).
        Refills a strategy draws later do not pass through it. Default: all draws."""
        return draws, {}

    def observe(self, batch: Rollouts) -> Feedback:
        """Per-prompt feedback on the scored batch (`prompt_id` = item id, `rewards`, `group`,
        `items`), before advantages are computed: update the sampler's state and return a `Feedback`
        (metrics; rows / tokens to drop from the loss, rewards to zero), which the trainer applies.
        It must not change the batch's masks or rewards itself. Default: no feedback."""
        return Feedback()

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


class _SamplerRegistry(Registry):
    """`Registry` that also refuses, at config time, a class that is not a complete `BaseSampler`."""

    def check_params(self, name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        factory = self.get(name).fn
        if inspect.isclass(factory):
            if not issubclass(factory, BaseSampler):
                raise RegistryError(f"sampler {name!r}: {factory.__name__} must subclass covey.samplers.BaseSampler "
                                  "(it declares every hook the trainer calls)")  # fmt: skip
            missing = sorted(getattr(factory, "__abstractmethods__", ()))
            if missing:
                raise RegistryError(f"sampler {name!r}: {factory.__name__} does not define {', '.join(missing)}")
            try:
                inspect.signature(factory.next).bind(None, 1, 1)
            except TypeError:
                raise RegistryError(f"sampler {name!r}: {factory.__name__}.next must take (k, group_size) and return "
                                  "a list of covey.samplers.Draw") from None  # fmt: skip
        return super().check_params(name, params)


SAMPLERS = _SamplerRegistry("sampler", protocol=BaseSampler, context=("items", "seed"))
register_sampler = SAMPLERS.register
