"""`executor: ray`: the engines run in N Ray actors in one placement group; the driver keeps the rest.

The thread executor's generator loop (`covey.runtime.thread`) drives a `RayEngine`, a proxy that
provides the `Engine` protocol (generate, load_weights, close, pad_token_id, version). It forwards
every call to `runtime.engine_workers` `EngineWorker` actors, each building the configured engine
(`ENGINES.build`) from a copy of the model sent through the object store. The actors are named
`covey-engine-<engine>-<run id>-<i>` and placed in the run's one placement group
(`covey.runtime.placement`: a bundle per worker, or per colocated engine-learner pair; the strategy
of `runtime.placement_strategy`). Sampler, rollout strategy, rewards
and learner stay in the driver process.

generate: the P prompts are split into contiguous chunks, one per worker (sizes differ by at most
one; worker i's chunk starts at i * P // N), each worker samples its chunk, and the rows are joined
in prompt order (prompt_index offset, token tensors right-padded). Worker 0 keeps the sampling seed;
worker i > 0 samples with seed + 1_000_003 * i (mod 2**31). With one worker this is the single-engine
call, so eta = 0 reproduces `inline` bit for bit.

Weight sync goes through a `covey.runtime.weight_sync` transport (`object_store`: one `ray.put` per
version; `disk`: safetensors + READY marker; `broadcast`: a process group of this process and the
workers, bucket by bucket): the driver pushes once and every actor pulls and loads between two
batches (the thread executor's rule); each transfer's bytes and seconds go into the metrics. Every `ray.get` waits at most `timeout_s`. A dead
actor, or a call past the timeout, is a one-line `RayEngineError` naming the actor; the thread
executor re-raises it as `GenerationFailed`, and the run resumes from its last checkpoint. Ray is
started with `ray.init(address=runtime.ray_address or $RAY_ADDRESS)` when no cluster is connected;
without an address that starts a local one.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from typing import Any

import torch

from covey.engine.base import concat_generations
from covey.runtime.ray_actors import RayActorFailed, actor_bundle, gather

__all__ = ["RayEngine", "RayEngineError", "split_prompts"]


class RayEngineError(RayActorFailed):
    """A call to an engine actor failed, timed out, or found the actor dead (one line)."""


def split_prompts(p: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) chunks of P prompts over the workers that get at least one."""
    bounds = [i * p // workers for i in range(workers + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _worker_seed(seed: int | None, i: int) -> int | None:
    return seed if seed is None or i == 0 else (seed + 1_000_003 * i) % 2**31


def _worker_class():
    import ray

    @ray.remote
    class EngineWorker:
        def __init__(self, name: str, params: dict, model, tokenizer, sync, colocated: bool = False):
            from covey.engine import ENGINES

            self.engine, self.sync = ENGINES.build(name, params, model, tokenizer), sync
            self.colocated = colocated  # a learner rank shares this device: free cached memory after generating

        def info(self) -> tuple:
            return int(self.engine.pad_token_id), int(self.engine.version), getattr(self.engine, "dtype", None)

        def generate(self, prompts, n, sampling):
            out = self.engine.generate(prompts, n, sampling)
            if self.colocated and torch.cuda.is_available():
                torch.cuda.empty_cache()  # the KV cache's blocks go back to the device for the learner
            return out

        def load_weights(self, handle):
            state, version = self.sync.pull(handle)
            self.engine.load_weights(state, version=version)
            return int(self.engine.version)

        def connect_sync(self, rank: int, world: int, host: str, port: int) -> None:
            self.sync.connect(rank, world, host, port)  # broadcast: join the sender's group

        def close(self) -> None:
            self.engine.close()

    return EngineWorker


class RayEngine:
    """An `Engine` whose work runs in `workers` named Ray actors (one placement group)."""

    pad_token_id: int
    version: int

    def __init__(self, name: str, params: dict[str, Any], model, tokenizer, *, timeout_s: float, workers: int = 1,
                 sync=None, address: str | None = None, num_cpus: int | None = None, actor_cpus: float = 1.0,
                 placement=None, owns_ray: bool | None = None):  # fmt: skip
        """`placement` (`covey.runtime.placement.plan`): the run's whole placement group (engine, learner
        and reward bundles); None: `workers` engine bundles of `actor_cpus` CPUs, or 1 GPU on CUDA.
        `owns_ray`: close() stops Ray (default: when this call started it)."""
        import ray
        from ray.util.placement_group import placement_group

        from covey.runtime.placement import Placement
        from covey.runtime.weight_sync import ObjectStoreSync

        self._ray, self.timeout_s = ray, float(timeout_s)
        self.sync = sync if sync is not None else ObjectStoreSync(timeout_s)
        self._started = not ray.is_initialized() if owns_ray is None else owns_ray
        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS") or "local"  # never another run's local cluster
            ray.init(address=address, num_cpus=num_cpus if address == "local" else None, include_dashboard=False,
                     log_to_driver=False, ignore_reinit_error=True)  # fmt: skip
        if placement is None:
            gpu = str(params.get("device", "cpu")).startswith("cuda")
            res = {"num_cpus": 0.0 if gpu else float(actor_cpus), "num_gpus": 1.0 if gpu else 0.0}
            placement = Placement([actor_bundle(gpu, actor_cpus) for _ in range(workers)], list(range(workers)), [], [], res)
        self.layout = placement
        workers = len(placement.engine)
        run = uuid.uuid4().hex[:6]
        self.actor_names = [f"covey-engine-{name.rsplit(':', 1)[-1]}-{run}-{i}" for i in range(workers)]
        self.actor_name = self.actor_names[0]
        self.run_id = run
        bundles = [dict(b) for b in placement.bundles]
        self._pg = placement_group(bundles, strategy=placement.strategy, name=f"covey-{run}")
        self._actors: list | None = []
        if not self._wait(self._pg.ready(), "the placement group"):
            self.close()
            raise RayEngineError(f"placement group covey-{run} ({placement.strategy}): bundles {bundles} not available within "
                                 f"runtime.timeout_s={self.timeout_s:g} s (cluster resources: {ray.cluster_resources()})")  # fmt: skip
        try:
            cls, model_ref = _worker_class(), ray.put(model)
            res = placement.engine_resources
            for i, actor in enumerate(self.actor_names):
                self._actors.append(cls.options(name=actor, num_cpus=res["num_cpus"], num_gpus=res["num_gpus"],
                                                resources=res.get("resources") or None,
                                                scheduling_strategy=self.bundle_strategy(placement.engine[i]))
                                    .remote(name, dict(params), model_ref, tokenizer, self.sync, placement.colocate))  # fmt: skip
            infos = self._gather([a.info.remote() for a in self._actors], "start")
            if self.sync.name == "broadcast":  # the sender (this process, rank 0) and every worker join at once
                host, port = self.sync.address()
                refs = [a.connect_sync.remote(i + 1, workers + 1, host, port) for i, a in enumerate(self._actors)]
                self.sync.connect(0, workers + 1, host, port)
                self._gather(refs, "connect the broadcast weight sync")
        except BaseException:
            self.close()  # a failed start frees its actors and placement group
            raise
        self.pad_token_id, self.version, self.dtype = infos[0]

    def bundle_strategy(self, index: int):
        """The scheduling strategy for bundle `index` of the run's placement group (learner and reward
        actors are placed through it: `self.layout` says which bundle is whose)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(placement_group=self._pg, placement_group_bundle_index=index)

    def _wait(self, ref, what: str) -> bool:
        ready, _ = self._ray.wait([ref], timeout=self.timeout_s)
        return bool(ready)

    def _gather(self, refs: list, what: str, workers: list[int] | None = None) -> list:
        """ray.get of one ref per worker, all within `timeout_s`; a failure names its actor (`ray_actors.gather`)."""
        names = [self.actor_names[i] for i in (workers or range(len(refs)))]
        return gather(refs, names, what, self.timeout_s, role="engine", error_cls=RayEngineError)

    def generate(self, prompts, n: int, sampling):
        prompts = list(prompts)
        chunks = split_prompts(len(prompts), len(self._actors))
        refs = []
        for i, (a, b) in enumerate(chunks):
            limits = sampling.prompt_max_new_tokens
            s = replace(sampling, seed=_worker_seed(sampling.seed, i),
                        prompt_max_new_tokens=None if limits is None else tuple(limits[a:b]))  # fmt: skip
            refs.append(self._actors[i].generate.remote(prompts[a:b], n, s))
        parts = self._gather(refs, "generate", list(range(len(chunks))))
        if len(parts) == 1:
            return parts[0]
        return concat_generations(parts, self.pad_token_id, [a for a, _ in chunks])

    def load_weights(self, source, version: int | None = None) -> dict[str, float]:
        """Push the weights to every worker through the sync transport; returns the transfer's
        `weight_sync/bytes` and `time/weight_sync` (the thread executor adds them to the next batch's metrics)."""
        target = self.version + 1 if version is None else int(version)
        handle = self.sync.push(source, target)
        refs = [a.load_weights.remote(handle) for a in self._actors]
        try:
            self.sync.send(handle)  # broadcast: the workers wait in pull; the other transports sent in push
        except Exception as e:
            self._gather(refs, "load_weights")  # a dead worker is what broke the collective: name it
            raise RayEngineError(f"weight sync {self.sync.name}: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        versions = self._gather(refs, "load_weights")
        self.version = versions[0]
        return dict(self.sync.last)

    def close(self) -> None:
        """Kill the actors, remove the placement group (and stop Ray when this engine started it); idempotent."""
        from ray.util.placement_group import remove_placement_group

        if self._actors is not None:
            for actor in self._actors:
                self._ray.kill(actor)
            self._actors = None
            remove_placement_group(self._pg)
            self.sync.close()
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
            self._started = False
