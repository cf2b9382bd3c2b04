"""How the runner holds one reward: its callable, where it runs, and which arguments it takes.

Where it runs: in a worker when a worker can rebuild it BY REFERENCE (a registered name, an import
path, or an object that pickles with every function and class it needs importable from a real
module); otherwise in the calling process. That covers closures, lambdas, and anything defined in
``__main__``: a worker cannot import the user's script (and must not run it, see `_pool.py`).

Which arguments: TRL calls ``fn(prompts=..., completions=..., **columns)``. A reward with ``**kwargs``
gets every column; one without gets only the columns its signature names, so extra columns such as
``completion_ids`` never break ``def reward(prompts, completions, answer)``.
"""

from __future__ import annotations

import inspect
import io
import logging
import pickle
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

from covey.rewards.model import ModelReward, is_reward_model
from covey.rewards.registry import get_reward, reward_caps

__all__ = ["Entry", "build_entry"]

log = logging.getLogger("covey.rewards.runner")


@dataclass
class Entry:
    label: str
    weight: float
    timeout_s: float
    fallback: float
    in_process: bool
    fn: Callable
    payload: bytes | None  # what a worker rebuilds the reward from; None = in-process only
    group_aware: bool
    group_key: str  # the column whose equal values a group-aware reward must see together ("group")
    accepts: frozenset[str] | None  # argument names it takes; None = anything (**kwargs)
    required: frozenset[str]  # argument names without a default
    reads: frozenset[str] = frozenset()  # the argument names it spells out (with or without **kwargs)

    def arguments(self, available: dict) -> dict:
        """The subset of `available` (name -> column) this reward takes; a missing required one is an error."""
        missing = self.required - set(available)
        if missing:
            raise ValueError(
                f"reward {self.label!r} needs column(s) {sorted(missing)} that this batch lacks; the batch has "
                f"{sorted(available)}. Add the column to the dataset items, or give the parameter a default"
            )
        if self.accepts is None:
            return available
        return {k: v for k, v in available.items() if k in self.accepts}


class _ByReference(pickle.Pickler):
    """A pickler that refuses functions and classes a worker could not import by name."""

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType)):
            module = sys.modules.get(getattr(obj, "__module__", None) or "")
            if module is None or module.__name__ in ("__main__", "__mp_main__") or module.__spec__ is None:
                raise pickle.PicklingError(f"{obj.__qualname__} is defined in {obj.__module__!r}, which a worker "
                                           "cannot import")
        return NotImplemented


def _by_reference(obj) -> tuple[bytes | None, str]:
    """(pickled ("object", obj), "") or (None, why a worker cannot rebuild it)."""
    buf = io.BytesIO()
    try:
        _ByReference(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(("object", obj))
    except Exception as e:  # noqa: BLE001 - pickling errors come in many types
        return None, str(e)
    return buf.getvalue(), ""


def _signature(fn, label: str) -> tuple[frozenset[str] | None, frozenset[str], frozenset[str]]:
    """(accepts, required, reads): see `Entry`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # some builtins have no signature: pass everything
        return None, frozenset(), frozenset()
    positional_only = [p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional_only:
        raise ValueError(f"reward {label!r} has positional-only parameter(s) {positional_only}; rewards are called "
                         "with keywords (prompts=..., completions=..., column=...)")
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    required = frozenset(p.name for p in named if p.default is p.empty)
    reads = frozenset(p.name for p in named)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None, required, reads
    return reads, required, reads


def build_entry(r, workers: int, spec_type) -> Entry:
    """An Entry from a RewardSpec / dict / callable / (callable, RewardSpec) pair (see RewardRunner).

    A loaded model (a torch module with a HF config, e.g. `AutoModelForSequenceClassification`) is a
    reward model: wrapped in `ModelReward`. A reward with ``in_process = True`` (reward models) always
    runs in the calling process."""
    if is_reward_model(r):
        r = ModelReward(r)
    if isinstance(r, tuple):  # (callable, RewardSpec): a ready function with its config, e.g. a task's verifier
        (fn, spec), named = r, False
    elif callable(r) and not isinstance(r, (dict, spec_type)):
        fn, spec, named = r, spec_type(name=getattr(r, "__name__", type(r).__name__)), False
    else:
        spec, named = (r if isinstance(r, spec_type) else spec_type(**r)), True
        fn = get_reward(spec.name, **spec.params)  # fails now, before any model loads
    payload, why = None, ""
    caps = reward_caps(fn)
    if workers > 0 and not spec.in_process and not caps.in_process:
        if named:  # a worker builds it from the name too
            payload = pickle.dumps(("spec", spec.name, spec.params))
            if spec.name.startswith(("__main__:", "__mp_main__:")):
                payload, why = None, "it is named from __main__"
        else:
            payload, why = _by_reference(fn)
        if payload is None:
            log.info("reward %r runs in the calling process, not in a worker (%s); its timeout_s still applies "
                     "in the main thread", spec.label, why)
    in_process = payload is None
    accepts, required, reads = _signature(fn, spec.label)
    return Entry(
        label=spec.label,
        weight=spec.weight,
        timeout_s=spec.timeout_s,
        fallback=spec.fallback,
        in_process=in_process,
        fn=fn,
        payload=payload,
        group_aware=bool(caps.group_aware),
        group_key=str(caps.group_key),
        accepts=accepts,
        required=required,
        reads=reads,
    )
