"""`runtime.learner_workers: N` (N >= 2) under `executor: ray`: the learner group as N Ray actors.

The actors `covey-learner-<run id>-<rank>` live in the run's placement group (`covey.runtime.placement`:
a bundle each, or the bundle of their engine under `runtime.colocate`; `runtime.actor_cpus` CPUs, or
`runtime.learner_gpus` GPUs when the run's device is CUDA) and join one
torch.distributed group (gloo on CPU, NCCL on GPU; rank 0's node address and a free port are the
rendezvous; every collective times out after `runtime.timeout_s`). Each holds a copy of the model
and of the optimizer and runs `covey.runtime.data_parallel.DataParallelLearner` (the one home of the
all-reduce): every rank gets the whole step batch (one `ray.put`, resolved by each actor) and the
same seeded mini-batch order, trains its contiguous shard of each mini-batch, and the gradients are
summed over the ranks before clipping and the optimizer step.

State, one copy per rank and identical on every rank: the ranks start from the driver's weights
and optimizer/scheduler state (fresh, or restored from a checkpoint) and take the same step with the
same all-reduced gradient, so their weights and optimizer moments stay equal. Rank 0 is the one read
back: after each update it returns its trainable weights, which the driver loads into its own model
(the model the checkpoint, the reference log-probs, the sampler hooks and the evaluation read); the
driver then publishes them to the engine workers through the run's weight-sync transport, as with
one learner. `pull_state` copies rank 0's optimizer and scheduler state into the driver's before a
checkpoint is written; a resumed run builds the group from the restored driver state, so with
eta = 0 it continues exactly.

The driver's own `Learner` stays: it computes the reference / probe log-probs and the sampler's
policy log-probs on the driver's copy of the weights. Metrics: `learn/loss` is the mini-batches'
all-reduced loss (the same on every rank); the other learner metrics are the mean over the ranks of
each rank's shard means (exact when the shards have equal token counts); `memory/peak_gb` is the
largest rank's.

Every `ray.get` waits at most `runtime.timeout_s`; a dead actor, or a failed call, is a one-line
`RayActorFailed` naming the actor (`ray_actors.gather`), after which the group is closed (its peers
would wait on a collective that cannot finish). The run resumes from its last checkpoint.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from covey.runtime.ray_actors import RayActorFailed, gather

__all__ = ["LearnerGroup"]


def _worker_class():
    import ray

    @ray.remote
    class LearnerWorker:
        def __init__(self, rank: int, world: int, model, algo, options: dict, optim, steps: int, cuda: bool, threads: int,
                     sharding: dict):  # fmt: skip
            if threads:
                torch.set_num_threads(threads)
            self.rank, self.world, self.algo, self.options = rank, world, algo, options
            self.optim, self.steps, self.sharding = optim, steps, sharding
            self.model = model.to("cuda" if cuda else "cpu")
            self.learner = None

        def address(self) -> str:
            import socket

            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
            return f"tcp://{ray.util.get_node_ip_address()}:{port}"

        def join(self, init_method: str, timeout_s: float, optimizer_state, scheduler_state, resume: str | None) -> str:
            from covey.runtime.data_parallel import DataParallelLearner, init_group
            from covey.learner.optim import build_optimizer

            # CPU offload on CUDA: the norm of the clipped gradients is reduced over the shards on the CPU (gloo)
            offload = self.sharding["name"] == "fsdp2" and self.sharding["offload"] and torch.cuda.is_available()
            init_group(self.rank, self.world, init_method, backend="cpu:gloo,cuda:nccl" if offload else None, timeout_s=timeout_s)
            if self.sharding["name"] == "fsdp2":  # shard first: the optimizer is built on the shards
                from covey.runtime.sharded import ShardedLearner, shard_model

                bf16 = self.options["dtype"] == "bf16"
                root = shard_model(self.model, bf16=bf16, offload=self.sharding["offload"])
                self.optimizer, self.scheduler = build_optimizer(self.model, self.optim, self.steps)
                self.learner = ShardedLearner(root, self.model, self.optimizer, self.scheduler, self.algo, **self.options)
                if resume is not None:  # each rank reads its parts (resharded when the world size changed)
                    from covey.runtime.dcp import load_shards

                    load_shards(self.model, self.optimizer, resume)
                elif optimizer_state:  # a plain checkpoint resumed sharded: the driver's state, by parameter name
                    from covey.runtime.dcp import set_full_optimizer_state

                    set_full_optimizer_state(self.model, self.optimizer, optimizer_state)
            else:
                self.optimizer, self.scheduler = build_optimizer(self.model, self.optim, self.steps)
                self.learner = DataParallelLearner(self.model, self.optimizer, self.scheduler, self.algo, **self.options)
                self.optimizer.load_state_dict(optimizer_state)
            self.scheduler.load_state_dict(scheduler_state)
            return self.learner.dtype

        def update(self, batch, generator_state):
            gen = torch.Generator()
            gen.set_state(generator_state)
            metrics = self.learner.update(batch, gen)
            return metrics, self.weights()

        def weights(self) -> dict | None:
            """Rank 0's trainable weights on the CPU (None elsewhere); fsdp2: gathered one parameter at a
            time into buckets of runtime.sync_bucket_mb (every rank takes part), never a second full copy."""
            from covey.models.state import trainable_state

            if self.sharding["name"] != "fsdp2":
                return {k: v.cpu() for k, v in trainable_state(self.model).items()} if self.rank == 0 else None
            from covey.runtime.sharded import full_state_buckets

            named = ((n, p) for n, p in self.model.named_parameters() if p.requires_grad)
            out: dict = {}
            for bucket in full_state_buckets(named, self.sharding["bucket_bytes"], keep=self.rank == 0):
                out.update(bucket)
            return out if self.rank == 0 else None

        def state(self):
            """(optimizer state, scheduler state) of this rank; fsdp2: (None, scheduler state)."""
            opt = None if self.sharding["name"] == "fsdp2" else self.optimizer.state_dict()
            return opt, self.scheduler.state_dict()

        def save_shards(self, path: str) -> None:
            from covey.runtime.dcp import save_shards

            save_shards(self.model, self.optimizer, path)

    return LearnerWorker


class LearnerGroup:
    """N learner actors behind the driver learner's `update(batch, generator)` (module docstring)."""

    def __init__(self, learner, model, optimizer, scheduler, cfg, engine, *, resume=None):
        import ray

        rt = cfg.runtime
        self.model, self.timeout_s, self.world = model, float(rt.timeout_s), int(rt.learner_workers)
        self.names = [f"covey-learner-{engine.run_id}-{r}" for r in range(self.world)]
        self.failure: str | None = None
        self.sharded = rt.sharding == "fsdp2"
        sharding = {"name": rt.sharding, "offload": rt.fsdp_offload, "bucket_bytes": int(rt.sync_bucket_mb * 2**20)}
        from covey.runtime.dcp import FOLDER, has_shards

        # fsdp2 ranks read a sharded checkpoint's shards themselves; a plain one comes as the driver's state
        resume = str(Path(resume) / FOLDER) if self.sharded and resume is not None and has_shards(resume) else None
        options = dict(temperature=learner.temperature, max_new_tokens=learner.max_new_tokens, epochs=learner.epochs,
                       mini_batches=learner.mini_batches, micro_batch_size=learner.micro_batch_size,
                       grad_clip=learner.grad_clip, dtype=learner.dtype, share_prompts=learner.share_prompts,
                       recompute_old_logprobs="always" if learner.recompute_old else "never")  # fmt: skip
        cuda = str(cfg.resolved_device()).startswith("cuda")
        source = model if not cuda else copy.deepcopy(model).cpu()
        cls, model_ref = _worker_class(), ray.put(source)
        self._actors: list | None = []
        try:
            for r, name in enumerate(self.names):
                res = engine.layout.learner_resources
                self._actors.append(cls.options(name=name, num_cpus=res["num_cpus"], num_gpus=res["num_gpus"],
                                                resources=res.get("resources") or None,
                                                scheduling_strategy=engine.bundle_strategy(engine.layout.learner[r]))
                                    .remote(r, self.world, model_ref, cfg.algo, options, cfg.optim, cfg.steps, cuda,
                                            0 if cfg.threads == "auto" else cfg.threads, sharding))  # fmt: skip
            init = self._gather([self._actors[0].address.remote()], "start", [0])[0]
            opt = optimizer.state_dict()
            if self.sharded:  # fsdp2 ranks shard a name-keyed state (empty for a fresh run)
                from covey.runtime.dcp import full_optimizer_state

                opt = full_optimizer_state(model, optimizer) if optimizer.state else None
            opt, sched = ray.put(opt), ray.put(scheduler.state_dict())
            self._gather([a.join.remote(init, self.timeout_s, opt, sched, resume) for a in self._actors], "join")
        except BaseException:
            self.close()
            raise

    def _gather(self, refs: list, what: str, ranks: list[int] | None = None) -> list:
        names = [self.names[r] for r in (ranks or range(len(refs)))]
        try:
            return gather(refs, names, what, self.timeout_s, role="learner")
        except BaseException as e:
            self.failure = str(e)
            self.close()  # the peers of a failed rank would wait on a collective that cannot finish
            raise

    def update(self, batch, generator: torch.Generator) -> dict[str, float]:
        """One training step on every rank; the driver's model gets rank 0's new weights."""
        import ray

        self._check_open("update")
        ref, state = ray.put(batch), generator.get_state()
        out = self._gather([a.update.remote(ref, state) for a in self._actors], "update")
        with torch.no_grad():
            self.model.load_state_dict(out[0][1], strict=False)
        rows = [m for m, _ in out]
        keys = dict.fromkeys(k for m in rows for k in m)  # a rank whose rows were all skipped has no surrogate metrics
        metrics = {k: sum(m[k] for m in rows if k in m) / sum(k in m for m in rows) for k in keys}
        metrics["learn/loss"] = rows[0]["learn/loss"]
        if "memory/peak_gb" in metrics:
            metrics["memory/peak_gb"] = max(m["memory/peak_gb"] for m in rows)
        return metrics

    def pull_state(self, optimizer, scheduler) -> None:
        """Copy rank 0's optimizer and scheduler state into the driver's (before a checkpoint); fsdp2:
        the scheduler only (the optimizer state stays sharded, `checkpoint` writes it)."""
        self._check_open("checkpoint")
        opt, sched = self._gather([self._actors[0].state.remote()], "state", [0])[0]
        if opt is not None:
            optimizer.load_state_dict(opt)
        scheduler.load_state_dict(sched)

    def checkpoint(self, payload: dict, optimizer, scheduler):
        """Before a checkpoint: ddp puts rank 0's optimizer state into the driver's `payload`; fsdp2
        takes the weights and the optimizer out of it and returns the writer of the sharded state
        (every rank writes its shards into <checkpoint folder>/learner, `covey.runtime.dcp`)."""
        self.pull_state(optimizer, scheduler)
        payload["scheduler"] = scheduler.state_dict()
        if not self.sharded:
            payload["optimizer"] = optimizer.state_dict()
            return None
        from covey.runtime.dcp import FOLDER

        payload.pop("model", None)
        payload.pop("optimizer", None)

        def write(folder: Path) -> None:
            self._check_open("checkpoint")
            self._gather([a.save_shards.remote(str(folder / FOLDER)) for a in self._actors], "checkpoint")

        return write

    def _check_open(self, what: str) -> None:
        if self._actors is None:  # one line naming the actor that failed; no checkpoint from a half-updated group
            raise RayActorFailed(f"{self.failure or 'the learner group is closed'} (no {what}: the learner group is gone "
                                 "with its optimizer state; resume from the last checkpoint)")  # fmt: skip

    def close(self) -> None:
        """Kill the learner actors (idempotent)."""
        if self._actors is None:
            return
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = None
