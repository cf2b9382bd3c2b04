"""Group-wise rewards: a reward that scores all completions of a unit together, with TRL's signature.

A reward sees a whole group when it declares ``group_aware = True`` (the runner then never splits a
group across calls or retries, and passes the ``group`` column: equal ids = completions of the same
prompt). `GroupWise` turns a function that scores ONE group into such a reward, called once per group:

    @group_wise()                      # or GroupWise(fn, group_key="paraphrase_set", prenormalized=True)
    def spread(prompts, completions, **columns):      # the lists hold one group's rows, in row order
        ...
        return [score per row]

group_key: the column whose equal values form a unit (default ``group``, one prompt's completions; any
item column, e.g. a ``paraphrase_set`` id, to compare completions of several prompts). The runner builds
that reward's chunks and retry units from the same column, so a unit is never split.
prenormalized: the scores are already normalised within the unit (e.g. z-scores, ArenaRL); pair such a
reward with the `identity` advantage (A = the scalar reward) or `dr_grpo`, and do not mix it with other
weighted rewards (the runner warns when it is).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence

from covey.rewards._scoring import RewardOutput, _await

__all__ = ["GroupWise", "group_wise", "iter_units"]


def iter_units(ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """unit id -> its row indices, units in order of first appearance.

    >>> iter_units([3, 1, 3, 2, 1])
    {3: [0, 2], 1: [1, 4], 2: [3]}
    """
    units: dict[Hashable, list[int]] = {}
    for i, g in enumerate(ids):
        units.setdefault(g, []).append(i)
    return units


class GroupWise:
    """A reward from `fn`, which scores one unit; see the module docstring. Metrics a call returns in a
    `RewardOutput` are gathered over the units."""

    group_aware = True

    def __init__(self, fn: Callable, *, group_key: str = "group", prenormalized: bool = False):
        if not callable(fn):
            raise TypeError(f"GroupWise needs a callable, got {type(fn).__name__}")
        self.fn, self.group_key, self.prenormalized = fn, group_key, bool(prenormalized)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        try:
            params = inspect.signature(fn).parameters.values()
            self._accepts = None if any(p.kind is p.VAR_KEYWORD for p in params) else {p.name for p in params}
        except (TypeError, ValueError):
            self._accepts = None

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        ids = columns.get(self.group_key)
        if ids is None:
            raise ValueError(f"group-wise reward {self.__name__!r} needs the {self.group_key!r} column (its units); the "
                             f"batch has {sorted(columns)}")
        n = len(completions)
        scores: list = [None] * n
        metrics: dict[str, list[float]] = {}
        for idx in iter_units(ids).values():
            sub = {k: [v[i] for i in idx] for k, v in columns.items() if self._accepts is None or k in self._accepts}
            out = _await(self.fn(prompts=[prompts[i] for i in idx], completions=[completions[i] for i in idx], **sub))
            if isinstance(out, RewardOutput):
                for k, vals in out.metrics.items():
                    metrics.setdefault(k, []).extend(vals)
            out = out.tolist() if hasattr(out, "tolist") else list(out)
            if len(out) != len(idx):
                raise ValueError(f"group-wise reward {self.__name__!r} returned {len(out)} scores for a unit of {len(idx)}")
            for i, v in zip(idx, out):
                scores[i] = v
        return RewardOutput(scores, metrics)


def group_wise(*, group_key: str = "group", prenormalized: bool = False) -> Callable[[Callable], GroupWise]:
    """Decorator form of `GroupWise`."""
    return lambda fn: GroupWise(fn, group_key=group_key, prenormalized=prenormalized)
