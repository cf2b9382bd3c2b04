"""`executor: ray` (first slice): the engine runs in a Ray actor; the driver keeps the rest.

The thread executor's generator loop (`covey.runtime.thread`) drives a `RayEngine`, a proxy that
provides the `Engine` protocol (generate, load_weights, close, pad_token_id, version). The proxy
forwards every call to one `EngineWorker` actor, which builds the configured engine
(`ENGINES.build`) from a copy of the model sent through the object store. Sampler, rollout
strategy, rewards and learner stay in the driver process.

Weight sync: `ray.put` of the state dict once, then the actor loads it between two batches (the
thread executor's rule). Every `ray.get` waits at most `timeout_s`. A dead actor, or a call past
the timeout, is a one-line `RayEngineError` naming the actor. The thread executor re-raises it as
`GenerationFailed`. Ray is started with `ray.init(address=runtime.ray_address or $RAY_ADDRESS)`
when no cluster is connected. Without an address that starts a local one.

Not built (docs/runtime.md): several engine workers, learner actors (DDP), reward/environment
worker pools, a placement group, and the tree/hidden-state engine protocols through the proxy.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

__all__ = ["RayEngine", "RayEngineError"]


class RayEngineError(RuntimeError):
    """A call to the engine actor failed, timed out, or found the actor dead (one line)."""


def _worker_class():
    import ray

    @ray.remote
    class EngineWorker:
        def __init__(self, name: str, params: dict, model, tokenizer):
            from covey.engine import ENGINES

            self.engine = ENGINES.build(name, params, model, tokenizer)

        def info(self) -> tuple:
            return int(self.engine.pad_token_id), int(self.engine.version), getattr(self.engine, "dtype", None)

        def generate(self, prompts, n, sampling):
            return self.engine.generate(prompts, n, sampling)

        def load_weights(self, state, version):
            self.engine.load_weights(state, version=version)
            return int(self.engine.version)

        def close(self) -> None:
            self.engine.close()

    return EngineWorker


class RayEngine:
    """An `Engine` whose work runs in one named Ray actor (covey-engine-<engine name>-<random>)."""

    pad_token_id: int
    version: int

    def __init__(self, name: str, params: dict[str, Any], model, tokenizer, *, timeout_s: float,
                 address: str | None = None, num_cpus: int | None = None):  # fmt: skip
        import ray

        self._ray, self.timeout_s = ray, float(timeout_s)
        self._started = not ray.is_initialized()
        if self._started:
            address = address or os.environ.get("RAY_ADDRESS")
            ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
                     log_to_driver=False, ignore_reinit_error=True)  # fmt: skip
        self.actor_name = f"covey-engine-{name.rsplit(':', 1)[-1]}-{uuid.uuid4().hex[:6]}"
        self._actor = _worker_class().options(name=self.actor_name, num_cpus=1).remote(name, dict(params), model, tokenizer)
        self.pad_token_id, self.version, self.dtype = self._get(self._actor.info.remote(), "start")

    def _get(self, ref, what: str):
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return self._ray.get(ref, timeout=self.timeout_s)
        except GetTimeoutError:
            raise RayEngineError(f"engine actor {self.actor_name!r}: {what} took longer than runtime.timeout_s="
                                 f"{self.timeout_s:g} s") from None  # fmt: skip
        except RayActorError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise RayEngineError(f"engine actor {self.actor_name!r} died during {what}: {first}") from None
        except RayTaskError as e:
            cause = e.cause if getattr(e, "cause", None) is not None else e
            msg = " ".join(str(cause).split())[:300]
            raise RayEngineError(f"engine actor {self.actor_name!r}: {what} failed: {type(cause).__name__}: {msg}") from None

    def generate(self, prompts, n: int, sampling):
        return self._get(self._actor.generate.remote(list(prompts), n, sampling), "generate")

    def load_weights(self, source, version: int | None = None) -> None:
        state = source.state_dict() if hasattr(source, "state_dict") else dict(source)
        state = {k: v.detach().cpu() for k, v in state.items()}
        target = self.version + 1 if version is None else int(version)
        self.version = self._get(self._actor.load_weights.remote(self._ray.put(state), target), "load_weights")

    def close(self) -> None:
        """Kill the actor (and stop Ray when this engine started it); idempotent."""
        if self._actor is not None:
            self._ray.kill(self._actor)
            self._actor = None
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
            self._started = False
