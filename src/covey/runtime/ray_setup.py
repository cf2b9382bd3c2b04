"""`executor: ray`: what the trainer asks of the runtime, in one place.

`build_engine` creates the one placement group (engine workers, then the learner actors' bundles,
then the reward actors') and its `RayEngine`, and hands the reward runner a Ray pool factory when
`runtime.reward_workers` asks for one; `build_learner_group` starts the learner actors
(`runtime.learner_workers >= 2`). The trainer names neither Ray nor a transport.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["build_engine", "build_learner_group", "weight_sync"]


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


def build_engine(cfg, run_dir: Path, engine_params: dict, source, tokenizer, rewards):
    """The `RayEngine` over `runtime.engine_workers` actors, in a placement group that also holds the
    learner actors' and reward actors' bundles; sets `rewards.pool_factory` for `reward_workers`."""
    from covey.runtime.ray_engine import RayEngine
    from covey.runtime.ray_learner import learner_bundles
    from covey.runtime.ray_rewards import RayRewardPool

    rt = cfg.runtime
    learners = learner_bundles(rt.learner_workers, cfg.resolved_device(), rt.actor_cpus)  # one placement group for all
    engine = RayEngine(cfg.engine.name, engine_params, source, tokenizer, timeout_s=rt.timeout_s,
                       workers=rt.engine_workers, sync=weight_sync(cfg, run_dir), address=rt.ray_address,
                       actor_cpus=rt.actor_cpus, extra_bundles=learners + [{"CPU": rt.actor_cpus}] * rt.reward_workers)  # fmt: skip
    if rt.reward_workers:  # the reward runner's pool as Ray actors (covey.runtime.ray_rewards)
        rewards.pool_factory = lambda n, _context: RayRewardPool(
            n, placement=lambda i: engine.placement(len(learners) + i), run_id=engine.run_id,
            cpus=rt.actor_cpus, timeout_s=rt.timeout_s)  # fmt: skip
    return engine


def build_learner_group(cfg, learner, model, optimizer, scheduler, engine, resume=None):
    """The learner actors of `runtime.learner_workers >= 2` (None for the driver's own learner);
    `resume`: the checkpoint folder the run resumed from (fsdp2's ranks read their shards there)."""
    if cfg.runtime.learner_workers < 2:
        return None
    from covey.runtime.ray_learner import LearnerGroup

    return LearnerGroup(learner, model, optimizer, scheduler, cfg, engine, resume=resume)
