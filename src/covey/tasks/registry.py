"""The task registry (`covey.registry.Registry`), so configs can say `task: {name: arithmetic, digits: 2}`
or name their own task by import path `task: {name: my_pkg.tasks:MyTask}`."""

from __future__ import annotations

from typing import Any

from covey.registry import Caps, Registry
from covey.tasks.base import Task

__all__ = ["TASKS", "TaskCaps", "get_task", "register_task"]


class TaskCaps(Caps):
    """What a task declares (its `caps`).

    strategy:  the rollout strategy that rolls out its items, and only it (an external environment
               that is both a task and a strategy); None: any.
    """

    strategy: str | None = None


TASKS = Registry("task", signature="Task(**params), a class or function returning a Task", caps=TaskCaps)
register_task = TASKS.register


def get_task(name: str, **params: Any) -> Task:
    """Build a registered (or imported) task; unknown names and parameters fail with the allowed values."""
    return TASKS.build(name, params)
