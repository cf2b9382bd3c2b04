"""The self-play estimators by hand: MARS (`mars`) against thu-nics/MARSHAL's reward_postprocess_agentic +
compute_reinforce_return + normalize_unique_values_by_player + masked_whiten, and Self-RedTeam's per-role
REINFORCE++ (`self_redteam`) against mickelliu/selfplay-redteaming's replay_buffer.normalize."""

import dataclasses
import math

import pytest
import torch

from covey.algos.advantages.selfplay import unique_value_norm
from tests.algos.test_step_credit import close, episodes, per_step, run

# rows 0, 1: role 0 (two turns each); rows 2, 3: role 1 (one turn; three turns); two tokens per turn
STEPS = [[0.0, 1.0], [0.0, -1.0], [2.0], [0.0, 0.0, 1.0]]
AGENTS = [[0, 0], [0, 0], [1], [1, 1, 1]]


def game(steps=STEPS, agents=AGENTS, groups=(0, 0, 0, 0)):
    b = episodes([{"group": g, "rewards": r, "anchors": [None] * len(r)} for g, r in zip(groups, steps)])
    return dataclasses.replace(b, step_agents=[list(a) for a in agents]).validate()


def test_turn_level_returns_are_normalised_per_role_then_whitened_per_role():
    adv = per_step(game(), run("mars", game()).advantages)
    # role 0: rewards [0, 1, 0, -1], mean 0 -> returns [1, 1], [-1, -1]; distinct {0, 1, -1}, mean 0 -> the
    # same; its 8 tokens +-1: mean 0, unbiased var 8/7 -> +-1/sqrt(8/7)
    a = 1 / math.sqrt(8 / 7 + 1e-8)
    close(adv[0], [a, a])
    close(adv[1], [-a, -a])
    # role 1: rewards [2, 0, 0, 1], mean 0.75 -> [1.25, -0.75, -0.75, 0.25]; returns row 2 [1.25], row 3
    # [-1.25, -0.5, 0.25]; distinct {0, 1.25, -1.25, -0.5, 0.25}, mean -0.05 -> [1.3], [-1.2, -0.45, 0.3];
    # tokens (two each): mean -0.0125, deviations 1.3125 -1.1875 -0.4375 0.3125, unbiased var 6.84375 / 7
    s = math.sqrt(6.84375 / 7 + 1e-8)
    close(adv[2], [1.3125 / s])
    close(adv[3], [-1.1875 / s, -0.4375 / s, 0.3125 / s])


def test_the_codes_batch_whitening_mixes_roles_the_default_does_not():
    other = [STEPS[0], STEPS[1], [7.0], [0.0, 0.0, 3.0]]  # role 1's rewards change, role 0's do not
    for whiten, same in (("role", True), ("batch", False)):
        a = run("mars", game(), whiten=whiten).advantages
        b = run("mars", game(other), whiten=whiten).advantages
        assert torch.equal(a[:2], b[:2]) == same
    # batch whitening: every token of both roles in one mean/variance
    raw = per_step(game(), run("mars", game(), whiten="none").advantages)
    close(raw[0] + raw[1] + raw[2] + raw[3], [1, 1, -1, -1, 1.3, -1.2, -0.45, 0.3])
    tokens = torch.tensor([1, 1, -1, -1, 1.3, -1.2, -0.45, 0.3], dtype=torch.float64).repeat_interleave(2)
    want = (tokens - tokens.mean()) / torch.sqrt(tokens.var() + 1e-8)
    got = per_step(game(), run("mars", game(), whiten="batch").advantages)
    close([v for row in got for v in row], want[::2].tolist())


def test_options_gamma_mean_std_and_the_distinct_values_with_zero():
    # gamma 0.5 over a role's own turns: role 1 row 3 returns [-0.75 - 0.375 + 0.0625, -0.75 + 0.125, 0.25]
    raw = per_step(game(), run("mars", game(), gamma=0.5, whiten="none", advantage_norm="none").advantages)
    close(raw[3], [-0.75 + 0.5 * (-0.75 + 0.5 * 0.25), -0.75 + 0.5 * 0.25, 0.25])
    # reward_norm mean_std: role 0 rewards [0, 1, 0, -1]: std sqrt(2/3) -> r / 0.816...
    raw = per_step(game(), run("mars", game(), reward_norm="mean_std", whiten="none", advantage_norm="none").advantages)
    close(raw[0], [1 / (math.sqrt(2 / 3) + 1e-6)] * 2)
    assert unique_value_norm([1.0, 2.0, 2.0], "mean") == {0.0: -1.0, 1.0: 0.0, 2.0: 1.0}  # 0 is always one of them
    assert unique_value_norm([0.0, 0.0], "mean_std") == {0.0: 0.0}
    # grouping group: each item's games on their own (role 0 of group 1 alone: rewards [0, -1], mean -0.5 ->
    # [0.5, -0.5], returns [0, -0.5]; role 0 of group 0 alone: [0, 1] -> [-0.5, 0.5], returns [0, 0.5])
    raw = per_step(game(groups=(0, 1, 0, 0)), run("mars", game(groups=(0, 1, 0, 0)), grouping="group", whiten="none",
                                                  advantage_norm="none").advantages)  # fmt: skip
    close(raw[1], [0.0, -0.5])
    close(raw[0], [0.0, 0.5])


def test_a_batch_without_episodes_is_refused():
    from tests.algos.test_dr_mas import batch

    with pytest.raises(Exception, match="multi-turn episodes"):
        b = batch()
        run("mars", dataclasses.replace(b, turn=None, step_rewards=None, step_anchors=None, step_agents=None))


def test_self_redteam_is_reinforce_pp_returns_normalised_per_role_with_the_population_variance():
    adv = per_step(game(), run("self_redteam", game()).advantages)
    # role 0: returns [1, 1], [-1, -1] (gamma 1): tokens +-1, mean 0, population var 1 -> +-1
    close(adv[0] + adv[1], [1.0, 1.0, -1.0, -1.0])
    # role 1: returns [2] and [1, 1, 1]: tokens [2, 2, 1 x 6], mean 1.25, population var 0.1875
    s = math.sqrt(0.1875)
    close(adv[2] + adv[3], [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s])
    other = [STEPS[0], STEPS[1], [9.0], [0.0, 3.0, 1.0]]
    assert torch.equal(run("self_redteam", game())[0][:2], run("self_redteam", game(other))[0][:2])
