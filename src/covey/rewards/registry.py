"""Reward registry: built-in rewards by name, user rewards by import path ``pkg.module:attr``.

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

from covey.plugins import import_object

__all__ = ["REWARDS", "get_reward", "register_reward"]

REWARDS: dict[str, Callable] = {}


def register_reward(name: str) -> Callable:
    """Register a reward function or reward class under `name` (``@register_reward("format")``)."""

    def deco(obj):
        if name in REWARDS and REWARDS[name] is not obj:
            raise ValueError(f"reward {name!r} is registered twice")
        if ":" in name:
            raise ValueError(f"reward names may not contain ':' (that marks an import path), got {name!r}")
        REWARDS[name] = obj
        return obj

    return deco


def get_reward(name: str, **params) -> Callable:
    """The reward callable for a registered name or an import path, with `params` applied.

    Classes are instantiated with `params`; functions get them bound as keyword arguments (each must
    be a named parameter of the function). Unknown names and parameters fail with the allowed values.

    >>> fn = get_reward("format", tags=["answer"])
    >>> fn(prompts=["q"], completions=["<answer>4</answer>"])
    [1.0]
    """
    if ":" in name:
        obj = import_object(name, "reward")
    elif name in REWARDS:
        obj = REWARDS[name]
    else:
        raise ValueError(
            f"unknown reward {name!r}; built-in rewards: {', '.join(sorted(REWARDS))}; "
            "or give your own as 'package.module:function'"
        )
    if isinstance(obj, type):
        try:
            return obj(**params)
        except TypeError as e:
            raise ValueError(f"reward {name!r}: bad params {sorted(params)} ({e})") from None
    if not callable(obj):
        raise ValueError(f"reward {name!r} is a {type(obj).__name__}, not a function or class")
    if not params:
        return obj
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return functools.partial(obj, **params)
    named = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in ("prompts", "completions")
    ]
    unknown = sorted(set(params) - set(named))
    if unknown:
        raise ValueError(f"reward {name!r} has no parameter(s) {unknown}; its parameters: {', '.join(named) or 'none'}")
    return functools.partial(obj, **params)
