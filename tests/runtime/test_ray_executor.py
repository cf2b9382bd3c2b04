"""`runtime.executor: ray` (engine actors in a placement group) on tiny-llama; skipped where Ray is
not installed. All share one local Ray (num_cpus=2, tests/runtime/conftest.py)."""

import re

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

from covey.engine import ENGINES  # noqa: E402
from covey.engine.base import SamplingParams  # noqa: E402
from covey.models import load as load_model  # noqa: E402
from covey.runtime.ray_engine import RayEngine, _worker_seed, split_prompts  # noqa: E402
from covey.runtime.thread import GenerationFailed  # noqa: E402
from covey.train.trainer import Trainer  # noqa: E402
from tests.runtime.test_thread_trainer import _cfg, _comparable, _train  # noqa: E402


def test_split_prompts():
    assert split_prompts(3, 2) == [(0, 1), (1, 3)]
    assert split_prompts(4, 2) == [(0, 2), (2, 4)]
    assert split_prompts(1, 3) == [(0, 1)]  # workers without a prompt get no call
    assert _worker_seed(5, 0) == 5 and _worker_seed(5, 1) == 1_000_008 and _worker_seed(None, 1) is None


def test_two_engine_workers_each_sample_their_share_of_the_prompts():
    """Rows of prompt chunk i equal a local engine's on that chunk with worker i's seed."""
    model, tok = load_model("tiny-llama")
    prompts = [[1, 5, 9], [1, 7], [1, 4, 4, 2]]
    sampling = SamplingParams(max_new_tokens=6, seed=5, prompt_max_new_tokens=(6, 3, 5))
    remote = RayEngine("torch", {}, model, tok, timeout_s=600, workers=2)
    try:
        got = remote.generate(prompts, 2, sampling)
    finally:
        remote.close()
    local = ENGINES.build("torch", {}, model, tok)
    a = local.generate(prompts[:1], 2, SamplingParams(max_new_tokens=6, seed=5, prompt_max_new_tokens=(6,)))
    b = local.generate(prompts[1:], 2, SamplingParams(max_new_tokens=6, seed=_worker_seed(5, 1), prompt_max_new_tokens=(3, 5)))
    assert got.prompt_index.tolist() == [0, 0, 1, 1, 2, 2]
    assert got.finish_reason == a.finish_reason + b.finish_reason
    for rows, part in ((slice(0, 2), a), (slice(2, 6), b)):
        t = part.completion_ids.shape[1]
        assert torch.equal(got.completion_ids[rows, :t], part.completion_ids)
        assert torch.equal(got.logprobs[rows, :t], part.logprobs)
        assert not got.completion_mask[rows, t:].any()  # padding only beyond the chunk's width


def test_ray_with_zero_staleness_reproduces_inline_bit_exactly(tmp_path):
    inline, w_inline = _train(_cfg(tmp_path), tmp_path / "inline")
    remote, w_remote = _train(_cfg(tmp_path, "runtime.executor=ray"), tmp_path / "ray")
    assert [_comparable(m) for m in inline] == [_comparable(m) for m in remote]
    for name, p in w_inline.items():
        assert torch.equal(p, w_remote[name]), name


def test_two_engine_workers_and_disk_sync_train_three_steps_within_the_bound(tmp_path):
    cfg = _cfg(tmp_path, "runtime.executor=ray", "runtime.engine_workers=2", "runtime.max_staleness=1",
               "runtime.weight_sync=disk")  # fmt: skip
    rows, weights = _train(cfg, tmp_path / "run")
    assert len(rows) == 3 and all(0 <= m["async/staleness"] <= 1 for m in rows)
    assert all(m["reward/mean"] == m["reward/mean"] for m in rows)  # trained on real rollouts (not NaN)
    newest = max(k - int(m["async/staleness"]) for k, m in enumerate(rows))  # the newest version a batch was made at
    synced = sorted((tmp_path / "run" / "weight_sync").iterdir())
    assert newest >= 1 and synced[-1].name == f"v{newest:08d}" and (synced[-1] / "READY").exists()


def test_a_killed_engine_actor_is_a_one_line_error_naming_it(tmp_path):
    trainer = Trainer(_cfg(tmp_path, "runtime.executor=ray", "runtime.timeout_s=300"), tmp_path / "run")
    try:
        trainer.step()
        with trainer.paused():  # the generator is between batches: kill the actor before the next one
            ray.kill(trainer.engine._actors[0])
        with pytest.raises(GenerationFailed) as e:
            trainer.step()  # batch 1 may have been made before the kill: then batch 2 fails
            trainer.step()
    finally:
        trainer.close()
    msg = str(e.value)
    assert len(msg.splitlines()) == 1, msg
    # the generator either loads version 2 into the dead actor or asks it to generate
    assert re.search(rf"engine actor {trainer.engine.actor_names[0]!r} died during (load_weights|generate): ", msg), msg


def test_killing_an_engine_worker_mid_generate_names_it_and_the_run_resumes_exactly(tmp_path):
    """2 engine workers, eta 0: step 1, checkpoint (it holds batch 1, made meanwhile), then worker 1
    is killed after generate was sent for batch 2; a one-line error names it. Resumed from the checkpoint, steps 2-3 equal an
    uninterrupted run's."""
    cfg = _cfg(tmp_path, "runtime.executor=ray", "runtime.engine_workers=2", "runtime.timeout_s=300")
    straight, w_straight = _train(cfg, tmp_path / "straight")
    first = Trainer(cfg, tmp_path / "cut")
    try:
        head = [first.step()]
        first.save()
        gather = first.engine._gather

        def kill_then_gather(refs, what, workers=None):
            if what == "generate":
                ray.kill(first.engine._actors[1])  # mid-step: both workers have their share of batch 2
            return gather(refs, what, workers)

        first.engine._gather = kill_then_gather
        with pytest.raises(GenerationFailed) as e:
            first.step()  # trains batch 1 (made before the kill)
            first.step()
        name = first.engine.actor_names[1]
    finally:
        first.close()
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and f"engine actor {name!r} died during generate: " in msg, msg
    tail, w_cut = _train(cfg, tmp_path / "cut", steps=2, resume=True)
    assert [_comparable(m) for m in straight] == [_comparable(m) for m in head + tail]
    for n, p in w_straight.items():
        assert torch.equal(p, w_cut[n]), n
