"""DART's adaptive data curation (dart-gui e0e606d `trainable_filter.filter_fn`): the per-task success filter,
the replay of a task's newest success into an all-failed group, trimming, the truncated importance weight of
the `dart` preset, and the config mapping onto covey's runtime."""

import math
from pathlib import Path

import pytest
import torch

from covey.algos.registry import CorrectionInputs
from covey.strategies import STRATEGIES
from covey.strategies.dart import curate
from covey.train.config import load_config
from tests.algos.test_step_credit import episodes
from tests._cli import train_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "maze_dart.yaml"


# ------------------------------------------------------------------------------------------ the filter
def test_each_rule_of_the_filter_by_hand():
    # groups (task): 0 (5) half solved, 1 (6) solved, 2 (7) unsolved with a stored success, 3 (8) unsolved
    rewards, groups, tasks = [1, 0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2, 3, 3], [5, 5, 6, 6, 7, 7, 8, 8]
    kept, replace, counts = curate(rewards, groups, tasks, stored={7})
    assert kept == [0, 1, 4, 5] and replace == {2: 4}  # group 2's first episode makes way for the stored success
    assert counts == {"groups": 4, "kept_groups": 2, "dropped_solved": 1, "dropped_unsolved": 1, "replayed": 1, "trimmed": 0}
    # acc_max below 1 also drops mostly solved tasks; mean 0.75 >= 0.7
    kept, _, counts = curate([1, 1, 1, 0], [0] * 4, [5] * 4, stored=set(), acc_max=0.7)
    assert kept == [] and counts["dropped_solved"] == 1
    # rewards below 0 (mean < 0) are not in [0, acc_max): dropped as unsolved
    assert curate([-1, 0], [0, 0], [5, 5], stored={5})[0] == []


def test_trimming_keeps_a_success_and_a_failure():
    rewards = [0, 0, 0, 1, 0, 0]
    for seed in range(20):
        kept, _, counts = curate(rewards, [0] * 6, [5] * 6, stored=set(), per_task_limit=2,
                                 generator=torch.Generator().manual_seed(seed))  # fmt: skip
        assert len(kept) == 2 and 3 in kept and counts["trimmed"] == 1
    kept, replace, _ = curate([0, 0, 0, 0], [0] * 4, [5] * 4, stored={5}, per_task_limit=2,
                              generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert len(kept) == 2 and replace[0] in kept  # the episode the replay takes the place of stays in


# ------------------------------------------------------------------------------------------ the strategy
class Canned:
    """An inner strategy that returns the next scripted batch."""

    def __init__(self, batches):
        self.batches = iter(batches)

    def rollout(self, items, ctx):
        return next(self.batches), {"episodes/count": 4.0}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _step_batch(rewards_a, rewards_b, version):
    """Two tasks (prompt ids 5 and 6, groups 0 and 1), two one-turn episodes each."""
    eps = [{"group": g, "rewards": [r], "anchors": [0]} for g, rs in ((0, rewards_a), (1, rewards_b)) for r in rs]
    b = episodes(eps)
    b.prompt_id = torch.tensor([5, 5, 6, 6])
    b.behaviour_logprobs = torch.full_like(b.completion_mask, -0.1 * version) * b.completion_mask
    b.policy_version = torch.full(b.completion_ids.shape, version, dtype=torch.long)
    b.items = [{"id": 5}, {"id": 5}, {"id": 6}, {"id": 6}]
    return b


def test_an_all_failed_group_trains_on_its_tasks_newest_stored_success():
    strat = STRATEGIES.build("dart", {"env": {"name": "maze"}})
    strat.inner = Canned([_step_batch([1, 0], [0, 0], version=1), _step_batch([0, 0], [1, 1], version=2)])
    ctx = type("Ctx", (), {"sampling": staticmethod(lambda r: type("S", (), {"seed": 3})())})()
    first, m1 = strat.rollout([], ctx)
    # task 5 half solved: kept; task 6 unsolved and nothing stored: dropped
    assert first.prompt_id.tolist() == [5, 5] and m1["dart/dropped_unsolved"] == 1 and m1["dart/stored_tasks"] == 1
    second, m2 = strat.rollout([], ctx)
    # task 5 now unsolved: its first episode gives way to step 1's success (version 1, its own log-probs);
    # task 6 solved by both: dropped (and stored)
    assert m2["dart/replayed"] == 1 and m2["dart/dropped_solved"] == 1 and m2["dart/stored_tasks"] == 2
    assert second.prompt_id.tolist() == [5, 5] and second.group.tolist() == [0, 0]
    assert second.scalar_rewards().tolist() == [0.0, 1.0]
    assert second.policy_version[:, 0].tolist() == [2, 1]  # the replayed episode keeps its version
    assert second.behaviour_logprobs[1, 0].item() == pytest.approx(-0.1)
    assert len(set(second.episode.tolist())) == 2  # a fresh episode id
    # the store survives a checkpoint
    again = STRATEGIES.build("dart", {"env": {"name": "maze"}})
    again.load_state_dict(strat.state_dict())
    assert set(again.store) == {5, 6} and torch.equal(again.store[5].completion_ids, strat.store[5].completion_ids)


def test_the_example_weights_each_token_by_min_of_the_importance_ratio_and_one():
    tis = load_config(EXAMPLE, []).algo.bind("correction")  # the dart preset with the example's algo.correction
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    behaviour = torch.tensor([[-1.5, -1.0, -0.5]])  # the rollout's (older) log-probs
    w, _ = tis(CorrectionInputs(old, behaviour, torch.ones(1, 3)))
    assert w[0].tolist() == pytest.approx([1.0, math.exp(-1.0), 1.0])  # min(exp(0.5), 1), exp(-1), exp(0)


def test_dart_config_errors_and_the_runtime_it_maps_onto():
    cfg = load_config(EXAMPLE, [])
    assert cfg.runtime.executor == "thread" and cfg.runtime.max_staleness == 1 and cfg.algo.correction.name == "tis"
    with pytest.raises(ValueError, match="needs an environment"):
        load_config(EXAMPLE, ["env=null"])
    with pytest.raises(ValueError, match="acc_max must be in"):
        STRATEGIES.build("dart", {"env": {"name": "maze"}, "acc_max": 1.5})
    with pytest.raises(ValueError, match="per_task_limit must be >= 2"):
        STRATEGIES.build("dart", {"env": {"name": "maze"}, "per_task_limit": 1})


@pytest.mark.slow  # one CLI run: 2 steps of the DART maze example (thread executor, staleness 1) with the tiny model
def test_covey_train_runs_the_maze_dart_example_for_two_steps(tmp_path):
    steps = train_example("agents/maze_dart.yaml", tmp_path / "run", 'sampling.max_new_tokens=4')
    assert all("dart/groups" in s for s in steps)