"""`runtime.learner_workers` (a data-parallel learner group of Ray actors) and `runtime.reward_workers`
(the reward pool as Ray actors) on tiny-llama; skipped where Ray is not installed. All share one local
Ray (num_cpus=2, tests/runtime/conftest.py): 2 engine workers and 2 learner actors fit with
runtime.actor_cpus=0.5."""

import re

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

from covey.rewards import RewardRunner  # noqa: E402
from covey.runtime.ray_actors import RayActorFailed  # noqa: E402
from covey.runtime.ray_rewards import RayRewardPool  # noqa: E402
from covey.train.trainer import Trainer  # noqa: E402
from tests.runtime.test_thread_trainer import _cfg, _comparable, _train  # noqa: E402

RAY = ["runtime.executor=ray", "runtime.engine_workers=2", "runtime.actor_cpus=0.5", "runtime.timeout_s=300",
       "optim.mini_batches=2"]  # fmt: skip


@pytest.fixture(scope="module")
def group_run(tmp_path_factory):
    """3 steps with 2 engine workers and 2 learner actors, eta 0: (config, metrics rows, weights)."""
    tmp = tmp_path_factory.mktemp("group")
    cfg = _cfg(tmp, *RAY, "runtime.learner_workers=2")
    rows, weights = _train(cfg, tmp / "run")
    return cfg, rows, weights


def test_two_learner_actors_train_as_one_learner(tmp_path, group_run):
    """The same 3 steps with the driver's one learner. Both runs sample the same rollouts (2 engine
    workers, eta 0, same seeds), so only the learner differs: the group sums float32 gradients of two
    shards in another order (DDP within 1e-6 of the gradient, tests/runtime/test_data_parallel.py),
    and Adam turns such differences into weight differences far below the update's size. Bound: the
    L2 distance between the two runs' weights is at most 1e-4 of the distance the weights moved in 3
    steps (Adam lr 3e-3); the losses agree within 1e-4 (relative)."""
    _, group, w_group = group_run
    one, w_one = _train(_cfg(tmp_path, *RAY), tmp_path / "one")
    assert [m["reward/mean"] for m in group] == [m["reward/mean"] for m in one]  # the same rollouts every step
    for a, b in zip(group, one):
        assert a["learn/loss"] == pytest.approx(b["learn/loss"], rel=1e-4, abs=1e-6)
    from covey.models import load

    init = dict(load("tiny-llama")[0].named_parameters())
    moved = torch.cat([(w_one[n] - init[n].detach()).flatten() for n in w_one]).norm()
    diff = torch.cat([(w_group[n] - w_one[n]).flatten() for n in w_one]).norm()
    assert moved > 1e-2, moved  # the weights did move
    assert diff <= 1e-4 * moved, (float(diff), float(moved))


def test_a_learner_actor_killed_mid_update_is_named_and_the_run_resumes_exactly(tmp_path, group_run):
    """Step 1, checkpoint; learner rank 1 is killed once the update of step 2 was sent to both ranks:
    a one-line error names it. Resumed from the checkpoint, steps 2-3 equal the uninterrupted group
    run's bit for bit (eta 0; every rank restarts from rank 0's saved optimizer state)."""
    cfg, straight, w_straight = group_run
    first = Trainer(cfg, tmp_path / "cut")
    try:
        head = [first.step()]
        first.save()
        group = first.learner_group
        gather = group._gather

        def kill_then_gather(refs, what, ranks=None):
            if what == "update":
                ray.kill(group._actors[1])  # mid-step: both ranks hold their update call
            return gather(refs, what, ranks)

        group._gather = kill_then_gather
        with pytest.raises(RayActorFailed) as e:
            first.step()
        name = group.names[1]
        with pytest.raises(RayActorFailed, match=re.escape(f"learner actor {name!r} died during update")):
            first.save()  # no checkpoint from a group that lost its optimizer state
    finally:
        first.close()
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and f"learner actor {name!r} died during update: " in msg, msg
    tail, w_cut = _train(cfg, tmp_path / "cut", steps=2, resume=True)
    assert [_comparable(m) for m in straight] == [_comparable(m) for m in head + tail]
    for n, p in w_straight.items():
        assert torch.equal(p, w_cut[n]), n


REWARDS = [{"name": "format", "params": {"tags": ["answer"]}, "weight": 0.5}, {"name": "length", "params": {"target": 3, "alpha": 0.5, "unit": "words"}, "weight": 0.25}]


def _score(runner):
    prompts = [f"q{i}" for i in range(6)]
    completions = ["<answer>1</answer>", "no tags", "<answer>x", "<answer>22</answer> tail", "", "<answer></answer>"]
    return runner(prompts, completions, group=[0, 0, 0, 1, 1, 1])


def test_the_ray_reward_pool_scores_equal_the_inline_scores_and_a_dead_actor_is_named():
    with RewardRunner(REWARDS, workers=0) as inline:
        want = _score(inline)
    runner = RewardRunner(REWARDS, workers=2)
    pools = []

    def ray_pool(n, _context):
        pools.append(RayRewardPool(n, placement=lambda i: None, run_id="test", cpus=0.5, timeout_s=120))
        return pools[-1]

    runner.pool_factory = ray_pool
    try:
        got = _score(runner)
        assert torch.equal(got.rewards, want.rewards) and torch.equal(got.total, want.total)
        assert got.names == want.names and not got.failed.any()
        assert want.rewards.T.tolist() == [[1.0, 0.0, 0.0, 0.0, 0.0, 1.0], [-1.0, -0.5, -1.0, -0.5, -1.5, -1.0]]  # by hand
        ray.kill(pools[0]._actors[1])
        with pytest.raises(RayActorFailed) as e:
            _score(runner)
    finally:
        runner.close()
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and "reward actor 'covey-reward-test-1' died during score: " in msg, msg
    assert pools[0]._actors == []  # closed with the runner
