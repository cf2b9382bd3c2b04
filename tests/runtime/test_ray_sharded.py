"""`runtime.sharding: fsdp2` with 2 learner actors on the shared local Ray (tiny-llama): it trains as one
learner, a killed rank is named and the run resumes bit-exactly from the sharded checkpoint, the
checkpoint holds no full copy of the weights, resumes on another world size, and `final/` loads with
`from_pretrained`."""

import re

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

from covey.runtime.ray_actors import RayActorFailed  # noqa: E402
from covey.train.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from covey.train.trainer import Trainer  # noqa: E402
from tests.runtime.test_ray_learner import RAY  # noqa: E402
from tests.runtime.test_thread_trainer import _cfg, _comparable, _train  # noqa: E402

FP32 = [*RAY, "model.dtype=fp32"]  # fp32: fsdp2 turns prompt sharing off, a bf16 forward of another shape rounds otherwise
FSDP2 = [*FP32, "runtime.learner_workers=2", "runtime.sharding=fsdp2"]


@pytest.fixture(scope="module")
def fsdp2_run(tmp_path_factory):
    """3 steps with 2 engine workers and 2 fsdp2 learner actors, eta 0: (config, metrics rows, weights)."""
    tmp = tmp_path_factory.mktemp("fsdp2")
    cfg = _cfg(tmp, *FSDP2)
    rows, weights = _train(cfg, tmp / "run")
    return cfg, rows, weights


def _step_and_save(cfg, run_dir) -> None:
    """Step 1 of `cfg` in `run_dir` and its checkpoint."""
    first = Trainer(cfg, run_dir)
    try:
        first.step()
        first.save()
    finally:
        first.close()


def test_fsdp2_learner_actors_train_as_one_learner(tmp_path, fsdp2_run):
    """The same bound as the ddp group's (tests/runtime/test_ray_learner.py): the same rollouts, losses
    within 1e-4, and weights whose distance is at most 1e-4 of how far 3 steps moved them."""
    _, group, w_group = fsdp2_run
    one, w_one = _train(_cfg(tmp_path, *FP32), tmp_path / "one")
    assert [m["reward/mean"] for m in group] == [m["reward/mean"] for m in one]
    for a, b in zip(group, one):
        assert a["learn/loss"] == pytest.approx(b["learn/loss"], rel=1e-4, abs=1e-6)
        assert a["learn/grad_norm"] == pytest.approx(b["learn/grad_norm"], rel=1e-4)
    from covey.models import load

    init = dict(load("tiny-llama")[0].named_parameters())
    moved = torch.cat([(w_one[n] - init[n].detach()).flatten() for n in w_one]).norm()
    diff = torch.cat([(w_group[n] - w_one[n]).flatten() for n in w_one]).norm()
    assert moved > 1e-2, moved
    assert diff <= 1e-4 * moved, (float(diff), float(moved))


def test_a_killed_rank_is_named_and_the_sharded_checkpoint_resumes_exactly(tmp_path, fsdp2_run):
    """Step 1, sharded checkpoint (each rank its shards; state.pt has no weights and no optimizer);
    rank 1 killed during step 2: a one-line error names it, no checkpoint is written from the broken
    group; resumed, steps 2-3 equal the straight run's bit for bit; `final/` loads with from_pretrained."""
    cfg, straight, w_straight = fsdp2_run
    first = Trainer(cfg, tmp_path / "cut")
    try:
        head = [first.step()]
        path = first.save()
        payload, meta = load_checkpoint(path)
        assert "model" not in payload and "optimizer" not in payload and meta["sharded"] is True
        shards = sorted(p.name for p in (path / "learner").iterdir())
        assert ".metadata" in shards and sum(n.endswith(".distcp") for n in shards) == 2, shards  # one file per rank
        group = first.learner_group
        gather = group._gather

        def kill_then_gather(refs, what, ranks=None):
            if what == "update":
                ray.kill(group._actors[1])
            return gather(refs, what, ranks)

        group._gather = kill_then_gather
        with pytest.raises(RayActorFailed) as e:
            first.step()
        name = group.names[1]
        with pytest.raises(RayActorFailed, match=re.escape(f"learner actor {name!r} died during update")):
            first.save()
    finally:
        first.close()
    assert len(str(e.value).splitlines()) == 1
    assert latest_checkpoint(tmp_path / "cut") == path  # the step-1 checkpoint is intact
    tail, w_cut = _train(cfg, tmp_path / "cut", steps=2, resume=True)
    assert [_comparable(m) for m in straight] == [_comparable(m) for m in head + tail]
    for n, p in w_straight.items():
        assert torch.equal(p, w_cut[n]), n


def test_a_sharded_checkpoint_resumes_on_another_world_size(tmp_path, fsdp2_run):
    """Saved by 2 fsdp2 ranks, resumed by the driver's one learner (DCP reshards to one process): the
    weights and the AdamW moments come back, so the next steps equal the straight run's up to the
    float order of the gradient sums (the same bound as above)."""
    cfg, straight, w_straight = fsdp2_run
    _step_and_save(cfg, tmp_path / "two")
    one = _cfg(tmp_path, *FP32, "runtime.learner_workers=1")
    resumed = Trainer(one, tmp_path / "two", resume=True)
    try:
        assert len(resumed.optimizer.state) > 0  # AdamW's moments came back from the shards
        tail = [resumed.step() for _ in range(2)]
        w = {n: p.detach().clone() for n, p in resumed.model.named_parameters()}
    finally:
        resumed.close()
    for a, b in zip(straight[1:], tail):
        assert a["reward/mean"] == b["reward/mean"]
        assert a["learn/loss"] == pytest.approx(b["learn/loss"], rel=1e-4, abs=1e-6)
    moved = torch.cat([(w_straight[n] - w[n]).flatten() for n in w]).norm()
    assert moved <= 1e-3 * torch.cat([p.flatten() for p in w.values()]).norm()


def test_final_and_export_of_an_fsdp2_run_load_with_from_pretrained(tmp_path):
    """`final/` (the end of the run) and `covey export` (rebuilt from the sharded checkpoint, read in one
    process) are Hugging Face folders with the same trained weights."""
    from transformers import AutoModelForCausalLM

    from covey.train.export import export_run
    from covey.train.run import train

    cfg = _cfg(tmp_path, *FSDP2, "steps=1", "eval.size=0")
    result = train(cfg, tmp_path / "run")
    assert load_checkpoint(latest_checkpoint(tmp_path / "run"))[1]["sharded"] is True
    final = AutoModelForCausalLM.from_pretrained(result["final"])
    exported = AutoModelForCausalLM.from_pretrained(export_run(tmp_path / "run", out=tmp_path / "export")["final"])
    from covey.models import load

    init = dict(load("tiny-llama")[0].named_parameters())
    for n, p in final.named_parameters():
        assert torch.equal(p, dict(exported.named_parameters())[n]), n
    assert any(not torch.equal(p, init[n]) for n, p in final.named_parameters())  # trained weights, not the initial ones


def test_a_ddp_checkpoint_resumes_sharded(tmp_path, fsdp2_run):
    """Saved by 2 ddp ranks (plain state.pt: weights and AdamW state), resumed by 2 fsdp2 ranks: each rank
    shards the driver's name-keyed AdamW state, so steps 2-3 follow the straight fsdp2 run (up to the
    float order of the gradient sums)."""
    cfg, straight, w_straight = fsdp2_run
    _step_and_save(_cfg(tmp_path, *FP32, "runtime.learner_workers=2", "runtime.sharding=ddp"), tmp_path / "run")
    assert "optimizer" in load_checkpoint(latest_checkpoint(tmp_path / "run"))[0]
    tail, w = _train(cfg, tmp_path / "run", steps=2, resume=True)
    for a, b in zip(straight[1:], tail):
        assert a["reward/mean"] == b["reward/mean"]
        assert a["learn/loss"] == pytest.approx(b["learn/loss"], rel=1e-4, abs=1e-6)
    diff = torch.cat([(w_straight[n] - w[n]).flatten() for n in w]).norm()
    assert diff <= 1e-3 * torch.cat([p.flatten() for p in w.values()]).norm()


def test_broadcast_weight_sync_trains_as_object_store(tmp_path, fsdp2_run):
    """The fsdp2 run again with weight_sync broadcast (gloo, 2 engine workers): the engines get the same
    bits, so the rollouts, metrics and weights equal the object_store run's exactly; each step
    reports the transfer's bytes (the tiny model's fp32 weights) and seconds."""
    cfg, straight, w_straight = fsdp2_run
    rows, weights = _train(_cfg(tmp_path, *FSDP2, "runtime.weight_sync=broadcast", "runtime.sync_bucket_mb=0.01"), tmp_path / "b")
    assert [_comparable(m) for m in rows] == [_comparable(m) for m in straight]
    for n, p in w_straight.items():
        assert torch.equal(p, weights[n]), n
    params = sum(p.numel() * 4 for p in w_straight.values())
    synced = [m for m in rows if "weight_sync/bytes" in m]
    assert synced and all(m["weight_sync/bytes"] == params and m["time/weight_sync"] > 0 for m in synced)


def test_colocated_engines_and_learners_train_as_separate_pools(tmp_path, fsdp2_run):
    """runtime.colocate: engine i and learner rank i share bundle i (1 CPU each pair here); where the
    actors sit changes no number: metrics and weights equal the separate-pools run's exactly."""
    _, straight, w_straight = fsdp2_run
    rows, weights = _train(_cfg(tmp_path, *FSDP2, "runtime.colocate=true"), tmp_path / "c")
    assert [_comparable(m) for m in rows] == [_comparable(m) for m in straight]
    for n, p in w_straight.items():
        assert torch.equal(p, weights[n]), n
