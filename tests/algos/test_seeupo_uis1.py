"""SeeUPO (its advantage and the reverse turn-by-turn updates) and UI-S1's semi-online advantage, by hand
on scripted multi-turn batches (AgentEvolver e59dea4 `ba_ray_trainer.py`; MobileAgent f7702e4 `core_uis1.py`)."""

import math
from pathlib import Path

import pytest
import torch

from covey.algos.advantages.ui_s1 import semi_online_returns
from covey.algos.presets import resolve_algo
from covey.algos.seeupo import TurnSchedule, turn_ratio, turn_rows
from covey.rollouts import Rollouts
from tests.algos.test_step_credit import episodes, per_step, run
from tests._cli import train_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "maze_seeupo.yaml"


def split_turns(batch):
    """The per_step layout of a concat batch: one row per turn (its tokens only), same episode ids."""
    rows = []
    for i in range(len(batch)):
        turn = batch.turn[i]
        for t in range(len(batch.step_rewards[i])):
            keep = turn == t
            rows.append((i, batch.completion_ids[i][keep].tolist(), t))
    width = max(len(r[1]) for r in rows)
    n = len(rows)
    ids = torch.zeros(n, width, dtype=torch.long)
    mask, turns = torch.zeros(n, width), torch.full((n, width), -1, dtype=torch.long)
    for r, (_, toks, t) in enumerate(rows):
        ids[r, : len(toks)], mask[r, : len(toks)], turns[r, : len(toks)] = torch.tensor(toks), 1.0, t
    src = [i for i, _, _ in rows]
    return Rollouts(prompt_ids=[batch.prompt_ids[i] for i in src], completion_ids=ids, completion_mask=mask,
                    behaviour_logprobs=torch.zeros(n, width), group=batch.group[src], prompt_id=batch.prompt_id[src],
                    rewards=batch.rewards[src], reward_names=batch.reward_names, episode=batch.episode[src], turn=turns,
                    step_rewards=[batch.step_rewards[i] for i in src], step_anchors=[batch.step_anchors[i] for i in src],
                    step_valid=None if batch.step_valid is None else [batch.step_valid[i] for i in src]).validate()  # fmt: skip


# ------------------------------------------------------------------------------------------ seeupo advantage
def _five():
    # group 0: outcomes 1, 0, 0 (3, 1 and 2 turns); group 1: 1, 1
    return episodes([
        {"group": 0, "rewards": [0, 0, 1], "anchors": [0, 1, 2]},
        {"group": 0, "rewards": [0], "anchors": [0]},
        {"group": 0, "rewards": [0, 0], "anchors": [0, 1]},
        {"group": 1, "rewards": [1], "anchors": [0]},
        {"group": 1, "rewards": [0, 1], "anchors": [0, 1]},
    ])  # fmt: skip


def test_seeupo_centres_by_group_then_normalises_over_the_batch_once_per_episode():
    batch = _five()
    # x = R - group mean: [2/3, -1/3, -1/3] and [0, 0]; batch mean 0, unbiased std sqrt((4+1+1)/9 / 4)
    std = math.sqrt((4 / 9 + 1 / 9 + 1 / 9) / 4)
    want = [2 / 3 / std, -1 / 3 / std, -1 / 3 / std, 0.0, 0.0]
    got = per_step(batch, run("seeupo", batch).advantages)
    for row, w, n in zip(got, want, [3, 1, 2, 1, 2]):
        assert row == pytest.approx([w] * n, abs=1e-6)  # the same value on every turn of an episode
    # per_step rows (one per turn): each episode still counts once in the statistics
    split = split_turns(batch)
    flat = run("seeupo", split).advantages
    for r in range(len(split)):
        vals = flat[r][split.completion_mask[r] > 0]
        assert torch.allclose(vals, torch.full_like(vals, want[int(split.episode[r])]), atol=1e-6)


def test_seeupo_clips_at_three_and_handles_one_episode_groups_and_no_spread():
    # one group of 12: one success -> x = [11/12, -1/12 x 11]; unbiased std over the batch sqrt(1/12): 3.175 -> 3
    batch = episodes([{"group": 0, "rewards": [float(i == 0)], "anchors": [0]} for i in range(12)])
    a = [row[0] for row in per_step(batch, run("seeupo", batch).advantages)]
    assert a[0] == pytest.approx(3.0) and a[1] == pytest.approx((-1 / 12) / math.sqrt(1 / 12))
    assert a[0] != pytest.approx((11 / 12) / math.sqrt(1 / 12))  # the unclipped value is 3.175
    # one-episode groups: mean 0 (the code), so x = R; then batch normalisation
    solo = episodes([{"group": g, "rewards": [r], "anchors": [0]} for g, r in enumerate([1.0, 3.0])])
    s = [row[0] for row in per_step(solo, run("seeupo", solo).advantages)]
    assert s == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)])
    # all equal: no spread -> only centred (zeros)
    flat = episodes([{"group": 0, "rewards": [1.0], "anchors": [0]} for _ in range(3)])
    assert torch.all(run("seeupo", flat).advantages == 0)
    with pytest.raises(ValueError, match="batch_norm needs norm_std false"):
        run("seeupo", flat, norm_std=True)


# ------------------------------------------------------------------------------------------ ui_s1 advantage
def test_ui_s1_returns_restart_at_an_invalid_turn():
    assert semi_online_returns([1.0, 0.1], [True, False], 0.5) == [1.0, 0.1]  # r_1 never reaches turn 0
    assert semi_online_returns([1.0, 0.1], [True, True], 0.5) == pytest.approx([1.05, 0.1])
    assert semi_online_returns([0.5, 1.0, 1.0], [True] * 3, 0.5) == pytest.approx([1.25, 1.5, 1.0])


def test_ui_s1_advantage_by_hand():
    batch = episodes([{"group": 0, "rewards": [1.0, 0.1], "anchors": [0, 1]},
                      {"group": 0, "rewards": [0.5, 1.0, 1.0], "anchors": [0, 1, 2]}])  # fmt: skip
    batch.step_valid = [[True, False], [True, True, True]]
    got = per_step(batch, run("ui_s1", batch).advantages)
    # episode term: every turn score of the group, mean 0.72, unbiased std sqrt(0.668 / 4)
    scores, std = [1.0, 0.1, 0.5, 1.0, 1.0], math.sqrt(0.668 / 4)
    ep = [(s - 0.72) / (std + 1e-6) for s in scores]
    # step term: returns a = [1.0, 0.1], b = [1.25, 1.5, 1.0]; position 0: {1.0, 1.25}, 1: {0.1, 1.5}, 2: {1.0} alone -> 0
    s0, s1 = 0.25 / math.sqrt(2), 1.4 / math.sqrt(2)
    step = [-0.125 / (s0 + 1e-6), -0.7 / (s1 + 1e-6), 0.125 / (s0 + 1e-6), 0.7 / (s1 + 1e-6), 0.0]
    want = [[ep[0] + step[0], ep[1] + step[1]], [ep[2] + step[2], ep[3] + step[3], ep[4] + step[4]]]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-5)
    # per_step rows give the same per-turn values
    split = split_turns(batch)
    flat = run("ui_s1", split).advantages
    values = [float(flat[r][split.completion_mask[r] > 0][0]) for r in range(len(split))]
    assert values == pytest.approx([v for row in want for v in row], abs=1e-5)
    # mean_norm: no division; step_weight 0 leaves the episode term alone
    only_ep = per_step(batch, run("ui_s1", batch, step_weight=0.0, mode="mean_norm").advantages)
    assert [v for row in only_ep for v in row] == pytest.approx([s - 0.72 for s in scores])


# ------------------------------------------------------------------------------------------ turn schedule
def test_turn_rows_and_the_clipped_sequence_ratio():
    turn = torch.tensor([[0, 0, -1, 1, 1], [0, -1, -1, -1, -1], [0, 1, 2, -1, -1]])
    mask = (turn >= 0).float()
    assert [(k, r.tolist()) for k, r in turn_rows(turn, mask, "reverse")] == [(2, [2]), (1, [0, 2]), (0, [0, 1, 2])]
    assert [k for k, _ in turn_rows(turn, mask, "sequential")] == [0, 1, 2]
    new = torch.tensor([[0.1, 0.3], [-1.0, -1.0], [0.05, 0.05], [0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    r = turn_ratio(new, torch.zeros(4, 2), m, 0.2, 0.2)
    # exp(mean 0.2) = 1.22 -> 1.2; exp(-1) -> 0.8; exp(0.05) inside; a row without tokens -> 1
    assert r.tolist() == pytest.approx([1.2, 0.8, math.exp(0.05), 1.0])


class PolicyShift:
    """A learner stand-in: log pi of every token is `version * shift[episode]` (the policy moves by a
    known amount per episode after each optimizer step)."""

    mini_batches = 1

    def __init__(self, shift):
        self.shift, self.version = shift, 0

    def fill_logprobs(self, batch):
        per_row = torch.tensor([self.version * self.shift[int(e)] for e in batch.episode])
        batch.old_logprobs = per_row[:, None] * batch.completion_mask


def test_reverse_updates_scale_each_turn_by_the_later_turns_ratios():
    batch = episodes([{"group": 0, "rewards": [0, 1, 1], "anchors": [0, 1, 2]},
                      {"group": 0, "rewards": [0, 0], "anchors": [0, 1]}])  # fmt: skip
    batch.advantages = torch.ones_like(batch.completion_mask) * (batch.turn >= 0)
    spec = resolve_algo({"preset": "seeupo"}).turn_updates
    sched, learner = TurnSchedule(spec), PolicyShift({0: 0.05, 1: 0.5})
    steps = sched.mini_batches(learner, batch, torch.Generator().manual_seed(0), default=None)
    assert sched._turns == [2, 1, 0] and [sorted(s.tolist()) for s in steps] == [[0], [0, 1], [0, 1]]
    seen = []
    for k, s in zip(sched._turns, steps):
        mb, stats = sched.begin(learner, batch.select(s))
        seen.append({int(mb.episode[i]): float(mb.advantages[i][mb.completion_mask[i] > 0][0]) for i in range(len(mb))})
        assert torch.all(mb.completion_mask * (mb.turn != k) == 0)  # only this turn's tokens train
        learner.version += 1  # the optimizer step moves the policy
    # turn 2 (episode 0 only): rho 1; turn 1: episode 0 scaled by exp(0.05) (its turn-2 change), episode 1 by 1;
    # turn 0: episode 0 by exp(0.05) * exp(0.05), episode 1 by clip(exp(0.5), 0.8, 1.2) = 1.2
    assert seen[0] == pytest.approx({0: 1.0})
    assert seen[1] == pytest.approx({0: math.exp(0.05), 1: 1.0})
    assert seen[2] == pytest.approx({0: math.exp(0.1), 1: 1.2})
    off = TurnSchedule(resolve_algo({"preset": "seeupo", "turn_updates": {"ratios": False}}).turn_updates)
    for s in off.mini_batches(learner, batch, torch.Generator().manual_seed(0), default=None):
        mb, _ = off.begin(learner, batch.select(s))
        assert torch.all(mb.advantages[mb.completion_mask > 0] == 1.0)
        learner.version += 1


def test_single_turn_rows_are_one_turn_and_a_group_reading_surrogate_is_refused():
    flat = Rollouts(prompt_ids=[torch.tensor([1])] * 3, completion_ids=torch.ones(3, 2, dtype=torch.long),
                    completion_mask=torch.ones(3, 2), behaviour_logprobs=torch.zeros(3, 2),
                    group=torch.tensor([0, 0, 1]), prompt_id=torch.tensor([0, 0, 1]),
                    rewards=torch.tensor([[1.0], [0.0], [1.0]]), reward_names=("accuracy",))  # fmt: skip
    sched = TurnSchedule(resolve_algo({"preset": "seeupo"}).turn_updates)
    assert sched.mini_batches(PolicyShift({}), flat, None, default=lambda: ["plain"]) == ["plain"]
    assert sched.begin(PolicyShift({}), flat) == (flat, {})
    # the advantage: x = R - group mean = [0.5, -0.5, 0] (a one-row group: mean 0 -> x = 1); std over x
    x = torch.tensor([0.5, -0.5, 1.0])
    assert run("seeupo", flat).advantages.tolist() == pytest.approx(((x - x.mean()) / x.std()).tolist())
    with pytest.raises(ValueError, match="reads whole groups"):
        resolve_algo({"preset": "seeupo", "surrogate": {"name": "trpa"}})


def test_one_turn_updates_match_the_plain_update():
    """With a single turn and nothing to rescale, the turn schedule is the ordinary update (same weights)."""
    from covey.learner.learner import Learner
    from covey.learner.optim import build_optimizer
    from covey.models import load
    from covey.train.config import OptimConfig

    batch = episodes([{"group": 0, "rewards": [1.0], "anchors": [0]}, {"group": 0, "rewards": [0.0], "anchors": [0]}])
    batch.advantages = torch.tensor([1.0, -1.0])
    out = []
    for spec in ({"preset": "seeupo", "kl": None}, {"preset": "seeupo", "kl": None, "turn_updates": None}):
        model, _ = load("tiny-llama", seed=0)
        model.float()
        opt, sched = build_optimizer(model, OptimConfig(lr=1e-2), 1)
        learner = Learner(model, opt, sched, resolve_algo(spec), temperature=1.0, max_new_tokens=8, dtype="fp32")
        b = Rollouts(**batch.__dict__)
        learner.fill_logprobs(b, field="behaviour_logprobs")  # sampled by these very weights
        m = learner.update(b, torch.Generator().manual_seed(0))
        out.append(({k: v.detach().clone() for k, v in model.state_dict().items()}, m))
    (a, ma), (b, mb) = out
    assert "seeupo/rho_mean" in ma and "seeupo/rho_mean" not in mb
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.slow  # one CLI run: 2 steps of the SeeUPO maze example with the tiny model
def test_covey_train_runs_the_maze_seeupo_example_for_two_steps(tmp_path):
    steps = train_example("agents/maze_seeupo.yaml", tmp_path / "run", 'sampling.max_new_tokens=4', 'rollout.strategy.max_turns=3')
    assert all("adv/seeupo/episodes" in s for s in steps)