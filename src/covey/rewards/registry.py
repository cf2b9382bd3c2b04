"""Reward registry (`covey.registry.Registry`): built-in rewards by name, user rewards by import path
``pkg.module:attr``.

A reward is anything with TRL's signature ``fn(prompts, completions, **columns) -> list[float | None]``
(called with keyword arguments only, as TRL does). A registered entry is either such a function, whose
keyword parameters config `params` may bind, or a class whose constructor takes the params and whose
instances are the reward (classes keep rewards picklable, so they can run in worker processes; closures
and callables from ``__main__`` run in the calling process).
This module only resolves names; running rewards (workers, timeouts, failures) is `runner.py`'s job.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields

from covey.registry import Registry, RegistryError

__all__ = ["REWARDS", "RewardCaps", "get_reward", "register_reward", "reward_caps"]


@dataclass(frozen=True)
class RewardCaps:
    """What a reward callable declares about itself, as attributes of the function or instance (TRL's
    reward functions are plain callables; an instance's may depend on its parameters). Every reader
    goes through `reward_caps(fn)`; an attribute the callable does not set takes the default here.

    group_aware:       it scores whole groups: the runner never splits a group across calls.
    group_key:         the column that names a row's group for a group-aware reward.
    in_process:        it always runs in the calling process (reward models, the live policy judge).
    needs_engine:      it asks for the trainer's engine (`set_context`, before each scoring).
    prenormalized:     its scores are already normalised within their groups.
    audit_against:     the column its verdicts are compared with (`reward/<name>/verifier_agreement`).
    audit_threshold:   its score at or above which it counts as a pass in that comparison.
    audit_columns:     item columns whose slices the agreement is also reported for.
    audit_warn_below:  an agreement below this is warned about.
    check_advantage:   check_advantage(name, params) raising ValueError: a reward tied to an advantage
                       estimator checks the run's (before any model loads).
    prefers:           `covey.compat` features it works best with (arenarl: a greedy anchor row); a run
                       that provides none of them loads with a warning.
    """

    group_aware: bool = False
    group_key: str = "group"
    in_process: bool = False
    needs_engine: bool = False
    prenormalized: bool = False
    audit_against: str | None = None
    audit_threshold: float = 0.5
    audit_columns: tuple[str, ...] = ()
    audit_warn_below: float = 0.5
    check_advantage: Callable[[str, dict], None] | None = None
    prefers: tuple[str, ...] = ()


def reward_caps(fn) -> RewardCaps:
    """The `RewardCaps` a reward callable declares (its attributes of those names)."""
    declared = {f.name: getattr(fn, f.name) for f in fields(RewardCaps) if hasattr(fn, f.name)}
    declared["audit_columns"] = tuple(declared.get("audit_columns") or ())
    declared["prefers"] = tuple(declared.get("prefers") or ())
    return RewardCaps(**declared)

REWARDS = Registry("reward", signature="fn(prompts, completions, **columns) -> list[float | None], or a class of such")
register_reward = REWARDS.register

_BATCH_ARGS = ("prompts", "completions")  # what every call passes; never a configured parameter


def get_reward(name: str, **params) -> Callable:
    """The reward callable for a registered name or an import path, with `params` applied.

    Classes are built with `params` (checked against the constructor); functions get them bound as
    keyword arguments (each must be a named parameter of the function other than prompts and
    completions). Unknown names and parameters fail with the allowed values.

    >>> fn = get_reward("format", tags=["answer"])
    >>> fn(prompts=["q"], completions=["<answer>4</answer>"])
    [1.0]
    """
    entry = REWARDS.get(name)
    if isinstance(entry.fn, type):
        return entry.build(params)
    if not params:
        return entry.fn
    try:
        sig = inspect.signature(entry.fn)
    except (TypeError, ValueError):
        return functools.partial(entry.fn, **params)
    named = [p.name for p in sig.parameters.values()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in _BATCH_ARGS]  # fmt: skip
    unknown = sorted(set(params) - set(named))
    if unknown:
        raise RegistryError(f"reward {name!r} has no parameter(s) {unknown}; its parameters: {', '.join(named) or 'none'}")
    return functools.partial(entry.fn, **params)
