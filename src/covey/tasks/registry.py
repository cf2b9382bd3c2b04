"""Name -> task factory, so configs can say `task: {name: arithmetic, digits: 2}`."""

from __future__ import annotations

from collections.abc import Callable

from covey.tasks.base import Task

__all__ = ["TASKS", "get_task", "register_task"]

TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str) -> Callable:
    def deco(factory: Callable[..., Task]) -> Callable[..., Task]:
        if name in TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        TASKS[name] = factory
        return factory

    return deco


def get_task(name: str, **params) -> Task:
    """Build a registered task; unknown names and parameters fail with the allowed values."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    try:
        return TASKS[name](**params)
    except TypeError as e:
        raise ValueError(f"task {name!r}: bad parameters {sorted(params)} ({e})") from None
