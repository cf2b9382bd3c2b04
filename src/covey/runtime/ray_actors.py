"""What every covey Ray actor shares: the one placement group, bounded waits, one-line errors.

`executor: ray` runs engine workers (`ray_engine`), the learner group (`ray_learner`) and the reward
pool (`ray_rewards`) as named actors in **one** placement group, created by the engine proxy with a
bundle per actor (`bundles`). Every wait on an actor goes through `gather`: all refs within one
`timeout_s`, and the first failure becomes a one-line `RayActorFailed` naming the actor:

    <role> actor 'covey-learner-1a2b3c-1' died during update: ...
    <role> actor '...': <what> took longer than runtime.timeout_s=600 s
    <role> actor '...' was killed by Ray's memory monitor during <what> (the node ran low on memory): ...
    <role> actor '...': <what> failed: <Exception>: <message>

When several actors fail in one call (a learner rank dies and its peer's all-reduce then fails), the
dead actor is named, not the peer that only saw the broken connection.
"""

from __future__ import annotations

import time

__all__ = ["RayActorFailed", "actor_bundle", "actor_error", "gather", "one_line"]


class RayActorFailed(RuntimeError):
    """A call to a covey Ray actor failed, timed out, or found the actor dead (one line naming it)."""


def actor_bundle(gpu: bool, cpus: float) -> dict[str, float]:
    """The placement-group bundle of one actor: 1 GPU on CUDA, else `cpus` (runtime.actor_cpus) CPUs."""
    return {"GPU": 1} if gpu else {"CPU": float(cpus)}


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def actor_error(e: BaseException, role: str, actor: str, what: str, timeout_s: float, error_cls) -> tuple[int, Exception]:
    """(rank of the failure: 0 = the actor died, 1 = other, 2 = timeout; the one-line error)."""
    from ray.exceptions import GetTimeoutError, OutOfMemoryError, RayActorError, RayTaskError

    name = f"{role} actor {actor!r}"
    if isinstance(e, GetTimeoutError):
        return 2, error_cls(f"{name}: {what} took longer than runtime.timeout_s={timeout_s:g} s")
    if isinstance(e, RayActorError):
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return 0, error_cls(f"{name} died during {what}: {first}")
    if isinstance(e, OutOfMemoryError):
        return 0, error_cls(f"{name} was killed by Ray's memory monitor during {what} (the node ran low on memory): "
                            f"{one_line(e, 200)}")  # fmt: skip
    cause = e.cause if isinstance(e, RayTaskError) and getattr(e, "cause", None) is not None else e
    return 1, error_cls(f"{name}: {what} failed: {type(cause).__name__}: {one_line(cause)}")


def gather(refs: list, names: list[str], what: str, timeout_s: float, *, role: str, error_cls=RayActorFailed,
           settle_s: float = 5.0) -> list:  # fmt: skip
    """ray.get of `refs` (one per actor, `names[i]` made `refs[i]`), all within `timeout_s`.

    On the first failure the others get up to `settle_s` more seconds, and the error raised is the
    most telling one: an actor that died before a failed call, before a timeout."""
    import ray
    from ray.exceptions import RayError

    deadline = time.monotonic() + timeout_s
    index = {ref: i for i, ref in enumerate(refs)}
    out: list = [None] * len(refs)
    pending, failures = list(refs), []
    while pending:
        left = max(0.0, deadline - time.monotonic())
        if failures:
            left = min(left, settle_s)
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not ready:
            if not failures:
                from ray.exceptions import GetTimeoutError

                failures.append(actor_error(GetTimeoutError(), role, names[index[pending[0]]], what, timeout_s, error_cls))
            break
        i = index[ready[0]]
        try:
            out[i] = ray.get(ready[0], timeout=max(0.0, deadline - time.monotonic()))
        except RayError as e:
            failures.append(actor_error(e, role, names[i], what, timeout_s, error_cls))
    if failures:
        raise min(failures, key=lambda f: f[0])[1] from None
    return out
