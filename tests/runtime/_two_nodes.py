"""A simulated 2-node Ray cluster (`ray.cluster_utils.Cluster`), run by tests/runtime/test_two_nodes.py in
its own process (a cluster needs its own Ray session, not the tests' shared local one).

1. One node (a local Ray of 2 CPUs): 3 steps of the tiny run with 1 engine and 2 fsdp2 learner actors.
2. A cluster of three nodes of 1 CPU each (labelled node_a, node_b, node_c), placement SPREAD, the engine
   held to node_a by its label (runtime.engine_resources) and each node holding one learner slot
   (runtime.learner_resources: Ray's SPREAD is best effort, and on some machines it packed both learners
   on one node): the same 3 steps, the learners on two nodes; equal to the one-node run. The third node
   is the spare a lost node's learner moves to.
3. The same run again: step 1 and its checkpoint, then the worker node holding a learner is removed
   while step 2's update is in flight: the error (one line) and the checkpoint are recorded, and the run
   resumes from the checkpoint for steps 2-3 on the nodes left. (The spare is there from the start: a node
   added right after a loss, on a loaded 2-core machine, timed out in Ray's fixed 30 s raylet wait.)
Writes a JSON report (argv[2]) of what the test asserts.
"""

import json
import sys
from pathlib import Path

import ray
import torch
from ray.cluster_utils import Cluster

from covey.runtime.ray_actors import RayActorFailed
from covey.train.checkpoint import latest_checkpoint
from covey.train.trainer import Trainer
from tests.runtime.test_thread_trainer import _cfg, _comparable

RUN = ["runtime.executor=ray", "runtime.engine_workers=1", "runtime.learner_workers=2", "runtime.sharding=fsdp2",
       "runtime.actor_cpus=0.5", "runtime.timeout_s=120", "optim.mini_batches=2", "model.dtype=fp32"]  # fmt: skip


def _steps(trainer, n):
    return [_comparable(trainer.step()) for _ in range(n)]


def _weights(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def _node_ids(trainer, role: str) -> set[str]:
    """The nodes that hold the `role` ("engine" or "learner") bundles (placement group table)."""
    where = ray.util.placement_group_table(trainer.engine._pg)["bundles_to_node_id"]
    return {where[i] for i in getattr(trainer.engine.layout, role)}


def _cluster(tries: int = 3):
    """The head (node_a) and two worker nodes. Ray waits a fixed 30 s for a new raylet to register; on a
    loaded 2-core machine that can run out, so the bring-up (only the simulated cluster's, never a step
    of the run) is tried again from scratch."""
    for attempt in range(tries):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node_a": 1, "learner_slot": 1}})
        try:
            workers = [cluster.add_node(num_cpus=1, resources={name: 1, "learner_slot": 1}) for name in ("node_b", "node_c")]
            return cluster, workers
        except Exception as e:  # Ray raises a bare Exception for the timeout
            print(f"cluster bring-up {attempt + 1}/{tries} failed: {e}", file=sys.stderr)
            cluster.shutdown()
            if attempt + 1 == tries:
                raise


def main(tmp: Path, report: Path) -> None:
    out: dict = {}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    t = Trainer(_cfg(tmp, *RUN), tmp / "one")
    try:
        one, w_one = _steps(t, 3), _weights(t)
    finally:
        t.close()
    ray.shutdown()

    cluster, workers = _cluster()
    ray.init(address=cluster.address, log_to_driver=False)
    cfg = _cfg(tmp, *RUN, "runtime.placement_strategy=SPREAD", "runtime.engine_resources={node_a: 0.1}",
              "runtime.learner_resources={learner_slot: 0.6}")  # engines on node_a, one learner per node
    t = Trainer(cfg, tmp / "two")
    try:
        two = _steps(t, 1)
        out.update(engine_nodes=len(_node_ids(t, "engine")), learner_nodes=len(_node_ids(t, "learner")))
        two += _steps(t, 2)
        w_two = _weights(t)
    finally:
        t.close()
    out["two_equals_one"] = two == one and all(torch.equal(w_one[n], w_two[n]) for n in w_one)

    t = Trainer(cfg, tmp / "cut")
    try:
        head = _steps(t, 1)
        saved = t.save()
        group, gather = t.learner_group, t.learner_group._gather
        held = _node_ids(t, "learner")
        lost = next(node for node in workers if node.node_id in held)  # never the head: it holds the GCS

        def remove_node_then_gather(refs, what, ranks=None):
            if what == "update":
                cluster.remove_node(lost)  # mid-step: both ranks hold their update call
            return gather(refs, what, ranks)

        group._gather = remove_node_then_gather
        try:
            t.step()
            out["error"] = None
        except RayActorFailed as e:
            out["error"] = str(e)
    finally:
        t.close()
    out["checkpoint_intact"] = latest_checkpoint(tmp / "cut") == saved
    t = Trainer(cfg, tmp / "cut", resume=True)
    try:
        tail = _steps(t, 2)
        out["resumed_off_the_lost_node"] = lost.node_id not in _node_ids(t, "learner")
        w_cut = _weights(t)
    finally:
        t.close()
    out["resume_exact"] = head + tail == two and all(torch.equal(w_two[n], w_cut[n]) for n in w_two)
    out["learner_names"] = [f"covey-learner-{group.names[0].split('-')[2]}-{r}" for r in range(2)]
    ray.shutdown()
    cluster.shutdown()
    report.write_text(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
