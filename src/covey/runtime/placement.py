"""Where `executor: ray` puts its actors: one placement group, a bundle per actor (or per colocated pair).

    runtime:
      engine_workers: 2      # engine actors
      learner_workers: 2     # learner actors (1 = the learner in the driver: no bundle)
      reward_workers: 0      # reward actors (CPU only)
      colocate: false        # true: engine i and learner rank i share bundle i (verl's hybrid engine)
      placement_strategy: PACK   # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD (Ray's)
      engine_gpus: 1         # on CUDA: GPUs per engine actor (a fraction shares a GPU)
      learner_gpus: 1        # on CUDA: GPUs per learner actor
      actor_cpus: 1          # on the CPU: CPUs per actor
      engine_resources: {}   # custom Ray resources per engine actor, e.g. {rollout_node: 0.01} (a node label)
      learner_resources: {}  # the same per learner actor

Separate pools (`colocate: false`, AReaL's layout): bundles [engine 0..E-1, learner 0..L-1, reward
0..R-1]. Colocated (`colocate: true`, needs L == E): bundle i holds engine i and learner rank i, with
`engine_gpus + learner_gpus` GPUs on CUDA (each actor takes its own share, e.g. 0.5 + 0.5 of one GPU)
or 2 x `actor_cpus` CPUs; generation and training then take turns on the device (`max_staleness: 0`),
and the engine frees its cached memory after each generate call. On CUDA an actor's bundle holds
GPUs only (the actor asks for 0 CPUs), as before.

`check_cluster` compares what the group asks for with what the cluster has, before any model loads,
and refuses with one line naming the resource: Ray would otherwise wait for the bundles until
`runtime.timeout_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Placement", "check_cluster", "check_placement", "plan"]


@dataclass
class Placement:
    bundles: list[dict[str, float]]
    engine: list[int]  # bundle index of each engine worker
    learner: list[int]  # bundle index of each learner rank (empty: the driver's learner)
    reward: list[int]  # bundle index of each reward actor
    engine_resources: dict = field(default_factory=dict)  # an engine actor's num_cpus, num_gpus, resources (custom)
    learner_resources: dict[str, float] = field(default_factory=dict)
    reward_resources: dict[str, float] = field(default_factory=dict)
    strategy: str = "PACK"
    colocate: bool = False

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for b in self.bundles:
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + v
        return out


def _bundle(*actors: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in actors:
        for k, v in (("CPU", a["num_cpus"]), ("GPU", a["num_gpus"]), *a.get("resources", {}).items()):
            out[k] = out.get(k, 0.0) + float(v)
    return {k: v for k, v in out.items() if v > 0}


def plan(cfg) -> Placement:
    """The placement group of `cfg`'s Ray runtime (module docstring)."""
    rt = cfg.runtime
    cuda = str(cfg.resolved_device()).startswith("cuda")
    engines, learners, rewards = rt.engine_workers, rt.learner_workers if rt.learner_workers >= 2 else 0, rt.reward_workers
    eng = {"num_cpus": 0.0 if cuda else rt.actor_cpus, "num_gpus": rt.engine_gpus if cuda else 0.0,
           "resources": dict(rt.engine_resources)}  # fmt: skip
    lrn = {"num_cpus": 0.0 if cuda else rt.actor_cpus, "num_gpus": rt.learner_gpus if cuda else 0.0,
           "resources": dict(rt.learner_resources)}  # fmt: skip
    rew = {"num_cpus": rt.actor_cpus, "num_gpus": 0.0, "resources": {}}
    if rt.colocate:
        bundles = [_bundle(eng, lrn) for _ in range(engines)]
        engine_at, learner_at = list(range(engines)), list(range(learners))
    else:
        bundles = [_bundle(eng) for _ in range(engines)] + [_bundle(lrn) for _ in range(learners)]
        engine_at, learner_at = list(range(engines)), list(range(engines, engines + learners))
    reward_at = list(range(len(bundles), len(bundles) + rewards))
    bundles += [_bundle(rew) for _ in range(rewards)]
    return Placement(bundles, engine_at, learner_at, reward_at, eng, lrn, rew, rt.placement_strategy, rt.colocate)


def check_placement(cfg) -> None:
    """Config-time rules of the placement (one-line ValueErrors)."""
    rt = cfg.runtime
    if not rt.colocate:
        return
    if rt.learner_workers < 2 or rt.learner_workers != rt.engine_workers:
        raise ValueError(f"runtime.colocate pairs each learner actor with an engine actor on one device: it needs "
                         f"runtime.learner_workers == runtime.engine_workers >= 2 (got {rt.learner_workers} learner, "
                         f"{rt.engine_workers} engine workers)")  # fmt: skip
    if rt.max_staleness > 0:
        raise ValueError(f"runtime.colocate: engine and learner take turns on one device, so generation cannot run ahead "
                         f"of training: use runtime.max_staleness: 0 (got {rt.max_staleness})")  # fmt: skip
    if str(cfg.resolved_device()).startswith("cuda") and rt.engine_gpus + rt.learner_gpus > 1:
        raise ValueError(f"runtime.colocate: an engine and a learner share one GPU, so engine_gpus + learner_gpus must be "
                         f"at most 1 (got {rt.engine_gpus:g} + {rt.learner_gpus:g})")  # fmt: skip


def check_cluster(placement: Placement, available: dict[str, float], nodes: int) -> None:
    """Refuse (one line) a placement group the cluster cannot hold: more GPUs or CPUs than it has in all,
    or STRICT_SPREAD with more bundles than nodes. (Whether the bundles fit node by node is Ray's to
    decide: it answers within runtime.timeout_s, and the engine proxy names the bundles then.)"""
    if placement.strategy == "STRICT_SPREAD" and len(placement.bundles) > nodes:
        raise ValueError(f"runtime.placement_strategy STRICT_SPREAD puts each of the {len(placement.bundles)} bundles on its "
                         f"own node, but the Ray cluster has {nodes}: use SPREAD or PACK, or add nodes")  # fmt: skip
    want = placement.total()
    for key in sorted(want, key=lambda k: (k not in ("GPU", "CPU"), k)):
        need, have = want[key], float(available.get(key, 0.0))
        label = {"GPU": "GPUs", "CPU": "CPUs"}.get(key, f"of resource {key!r}")
        if need > have + 1e-9:
            raise ValueError(f"runtime asks for {need:g} {label} in its placement group ({len(placement.bundles)} bundles: "
                             f"{placement.bundles}) but the Ray cluster has {have:g} on {nodes} node(s): lower "
                             "engine_workers / learner_workers / reward_workers or their engine_gpus / learner_gpus / "
                             "actor_cpus, or add nodes")  # fmt: skip
