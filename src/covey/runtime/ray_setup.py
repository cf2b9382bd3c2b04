"""`executor: ray`: what the trainer asks of the runtime, in one place.

`connect` joins the cluster and checks it can hold the run before any model loads; `build_engine`
creates the one placement group (`covey.runtime.placement`) and its `RayEngine`, and hands the
reward runner a Ray pool factory when `runtime.reward_workers` asks for one; `build_learner_group`
starts the learner actors (`runtime.learner_workers >= 2`). The trainer names no transport.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

log = logging.getLogger("covey")

__all__ = ["build_engine", "build_learner_group", "connect", "weight_sync"]


def weight_sync(cfg, run_dir: Path):
    """The `runtime.weight_sync` transport the engine workers pull from."""
    from covey.runtime.weight_sync import BroadcastSync, DiskSync, ObjectStoreSync

    rt = cfg.runtime
    if rt.weight_sync == "disk":
        return DiskSync(Path(run_dir) / "weight_sync", timeout_s=rt.timeout_s)
    if rt.weight_sync == "broadcast":
        backend = "nccl" if str(cfg.resolved_device()).startswith("cuda") else "gloo"
        return BroadcastSync(rt.timeout_s, bucket_bytes=int(rt.sync_bucket_mb * 2**20), backend=backend)
    return ObjectStoreSync(rt.timeout_s)


def connect(cfg) -> bool:
    """Join (or start) the Ray cluster and check that it can hold the run's placement group, before any
    model loads: an unreachable `runtime.ray_address` or a group larger than the cluster is one line,
    within `runtime.timeout_s`, never a hang. Returns whether this call started Ray (the run stops it)."""
    import os

    import ray

    from covey.runtime.placement import check_cluster, plan

    rt = cfg.runtime
    if ray.is_initialized():
        started = False
    else:
        address = rt.ray_address or os.environ.get("RAY_ADDRESS") or "local"  # local: a Ray of this run's own
        if address not in ("auto", "local"):
            _probe(address, min(rt.timeout_s, 15.0))
        cpus = None
        if address == "local":  # a laptop's Ray: enough logical CPUs for the run's bundles (actors share the cores)
            need = math.ceil(plan(cfg).total().get("CPU", 0.0))
            cpus = max(os.cpu_count() or 1, need)
            if need > (os.cpu_count() or 1):
                log.info("runtime: the local Ray gets %d logical CPUs for %g CPUs of actors on %d cores", cpus, need,
                         os.cpu_count() or 1)  # fmt: skip
        try:
            ray.init(address=address, num_cpus=cpus, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
        except (ConnectionError, TimeoutError, RuntimeError) as e:
            raise ValueError(f"runtime.ray_address {address!r}: could not join the Ray cluster: "
                             f"{' '.join(str(e).split())[:200]}") from None  # fmt: skip
        started = True
    try:
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        check_cluster(plan(cfg), ray.cluster_resources(), nodes)
    except BaseException:
        if started:
            ray.shutdown()
        raise
    return started


def _probe(address: str, timeout_s: float) -> None:
    """A TCP connection to the address's GCS port (ray://host:port: the client server) within timeout_s."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"runtime.ray_address {address!r}: expected host:port (what `ray start --head` prints), "
                         "ray://host:port, or auto")  # fmt: skip
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ValueError(f"runtime.ray_address {address!r}: no Ray cluster answers there within {timeout_s:g} s "
                         f"({type(e).__name__}: {e}); start one with `ray start --head` or fix the address") from None  # fmt: skip


def build_engine(cfg, run_dir: Path, engine_params: dict, source, tokenizer, rewards, owns_ray: bool | None = None):
    """The `RayEngine` over `runtime.engine_workers` actors, in the run's one placement group
    (`covey.runtime.placement`); sets `rewards.pool_factory` for `runtime.reward_workers`."""
    from covey.runtime.placement import plan
    from covey.runtime.ray_engine import RayEngine
    from covey.runtime.ray_rewards import RayRewardPool

    rt = cfg.runtime
    layout = plan(cfg)
    engine = RayEngine(cfg.engine.name, engine_params, source, tokenizer, timeout_s=rt.timeout_s,
                       sync=weight_sync(cfg, run_dir), address=rt.ray_address, placement=layout, owns_ray=owns_ray)  # fmt: skip
    if rt.reward_workers:  # the reward runner's pool as Ray actors (covey.runtime.ray_rewards)
        rewards.pool_factory = lambda n, _context: RayRewardPool(
            n, placement=lambda i: engine.bundle_strategy(layout.reward[i]), run_id=engine.run_id,
            cpus=rt.actor_cpus, timeout_s=rt.timeout_s)  # fmt: skip
    return engine


def build_learner_group(cfg, learner, model, optimizer, scheduler, engine, resume=None):
    """The learner actors of `runtime.learner_workers >= 2` (None for the driver's own learner);
    `resume`: the checkpoint folder the run resumed from (fsdp2's ranks read their shards there)."""
    if cfg.runtime.learner_workers < 2:
        return None
    from covey.runtime.ray_learner import LearnerGroup

    return LearnerGroup(learner, model, optimizer, scheduler, cfg, engine, resume=resume)
