"""`runtime.reward_workers: N` under `executor: ray`: the reward runner's worker pool as N Ray actors.

`RayRewardPool` is a drop-in for `covey.rewards._pool.WorkerPool` (the same `run(jobs, give_up_s)`
and `close()`), handed to the `RewardRunner` as its `pool_factory`: the runner keeps all the scoring
rules (chunks of whole groups, per-sample retry after a timeout, failure kinds, fallbacks) and each
job is scored in an actor by `covey.rewards._pool.run_job`, the pool processes' own code. So Ray
scores equal the process pool's, and the in-process ones (tested).

The actors `covey-reward-<run id>-<i>` live in the run's placement group (one bundle of
`runtime.actor_cpus` CPUs each) and cache each reward built from its payload, as pool workers do.
A job that passes its reward's `timeout_s` is a `timeout` for the runner, and its actor is killed and
replaced by a fresh one in the same bundle (named `...-<i>.<restart>`), as the process pool does with
a hung worker. An actor that dies (killed, out of memory, a reward that crashes the process) is a
one-line `RayActorFailed` naming it (`ray_actors`), never a hang; starting an actor waits at most
`runtime.timeout_s`.
"""

from __future__ import annotations

import time
from collections import deque

from covey.runtime.ray_actors import RayActorFailed, actor_error, gather

__all__ = ["RayRewardPool"]


def _actor_class():
    import ray

    @ray.remote
    class RewardWorker:
        def __init__(self):
            self.payloads, self.built = {}, {}

        def ready(self) -> bool:
            import covey.rewards  # noqa: F401 - the registry's rewards, before the first job's deadline starts

            return True

        def score(self, key: int, payload: bytes | None, args: tuple):
            from covey.rewards._pool import run_job

            return run_job(self.payloads, self.built, key, payload, args)

    return RewardWorker


class RayRewardPool:
    """`n` reward actors in placement-group bundles `placement(i)`; see the module docstring."""

    def __init__(self, n: int, *, placement, run_id: str, cpus: float = 1.0, timeout_s: float = 600.0):
        if n < 1:
            raise ValueError(f"RayRewardPool needs n >= 1 actors, got {n}")
        self._placement, self._cpus, self.timeout_s = placement, float(cpus), float(timeout_s)
        self._run_id, self.restarts = run_id, 0
        self._cls = _actor_class()
        self.names = [f"covey-reward-{run_id}-{i}" for i in range(n)]
        self._actors: list = [self._spawn(i) for i in range(n)]
        self._loaded: list[set] = [set() for _ in range(n)]
        try:
            gather([a.ready.remote() for a in self._actors], self.names, "start", self.timeout_s, role="reward")
        except BaseException:
            self.close()
            raise

    def _spawn(self, i: int):
        return self._cls.options(name=self.names[i], num_cpus=self._cpus, scheduling_strategy=self._placement(i)).remote()

    def _replace(self, i: int) -> None:
        import ray

        ray.kill(self._actors[i])
        self.restarts += 1
        self.names[i] = f"covey-reward-{self._run_id}-{i}.{self.restarts}"
        self._actors[i], self._loaded[i] = self._spawn(i), set()
        gather([self._actors[i].ready.remote()], [self.names[i]], "start", self.timeout_s, role="reward")

    def run(self, jobs: list, give_up_s: float | None = None) -> list:
        """One ChunkOutcome, "timeout" or "skipped" per job, in job order (`WorkerPool.run`'s contract)."""
        import ray
        from ray.exceptions import RayError

        results: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        busy: dict[int, tuple[int, float, object]] = {}  # actor index -> (job index, deadline, ref)
        give_up = time.monotonic() + give_up_s if give_up_s is not None else None
        while pending or busy:
            if give_up is not None and pending and time.monotonic() > give_up:
                for ji in pending:
                    results[ji] = "skipped"
                pending.clear()
            for wi in range(len(self._actors)):
                if wi in busy or not pending:
                    continue
                ji = pending.popleft()
                job = jobs[ji]
                payload = None if job.key in self._loaded[wi] else job.payload
                self._loaded[wi].add(job.key)
                ref = self._actors[wi].score.remote(job.key, payload, job.args)
                busy[wi] = (ji, time.monotonic() + job.timeout_s, ref)
            if not busy:
                continue
            wait_s = max(0.0, min(d for _, d, _ in busy.values()) - time.monotonic())
            ready, _ = ray.wait([r for _, _, r in busy.values()], num_returns=1, timeout=wait_s)
            for wi in list(busy):
                ji, deadline, ref = busy[wi]
                if ref in ready:
                    try:
                        results[ji] = ray.get(ref, timeout=self.timeout_s)
                    except RayError as e:
                        raise actor_error(e, "reward", self.names[wi], "score", self.timeout_s, RayActorFailed)[1] from None
                    del busy[wi]
                elif time.monotonic() >= deadline:
                    results[ji] = "timeout"  # the runner re-scores the chunk's samples one by one
                    del busy[wi]
                    self._replace(wi)
        return results

    def close(self) -> None:
        """Kill the actors (idempotent)."""
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
