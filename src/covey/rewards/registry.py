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

from covey.registry import Registry, RegistryError

__all__ = ["REWARDS", "get_reward", "register_reward"]

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
