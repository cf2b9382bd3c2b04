"""Dr. MAS (`dr_mas`): per-agent GRPO over turns, against langfengQ/DrMAS's
compute_grpo_outcome_advantage with group_by_agent_id, by hand."""

import math

import pytest
import torch

from covey.algos.registry import ADVANTAGES
from covey.rollouts import Rollouts, RolloutsError

T = [[0, 0, -1, 1, -1, -1], [0, -1, 1, -1, 2, 2], [0, 0, 0, -1, -1, -1], [0, 0, -1, -1, -1, -1]]


def batch(step_agents=((0, 1), (0, 1, 0), (0,), (1,)), returns=(1.0, 0.0, 1.0, 2.0)):
    """Concat rows (one per episode): group 0 = episodes 0-2, group 1 = episode 3 alone."""
    turn = torch.tensor(T)
    n = len(T)
    return Rollouts(
        prompt_ids=[torch.tensor([1, 2])] * n, completion_ids=torch.arange(1, 7).repeat(n, 1),
        completion_mask=(turn >= 0).float(), behaviour_logprobs=torch.zeros(n, 6),
        group=torch.tensor([0, 0, 0, 1]), prompt_id=torch.tensor([0, 0, 0, 1]), finish_reason=["stop"] * n,
        rewards=torch.tensor(returns).reshape(n, 1), reward_names=("env_return",),
        episode=torch.arange(n), turn=turn, step_rewards=[[0.0] * (max(t) + 1) for t in T],
        step_anchors=[[None] * (max(t) + 1) for t in T],
        step_agents=None if step_agents is None else [list(a) for a in step_agents],
    ).validate()  # fmt: skip


def tokens(values):
    """[N, T]: values[i][turn] on the tokens of each turn, 0 on env tokens / padding."""
    return torch.tensor([[values[i][t] if t >= 0 else 0.0 for t in row] for i, row in enumerate(T)])


def test_each_agent_is_normalised_with_its_own_turns_in_the_group():
    adv = ADVANTAGES["dr_mas"].bind({})(batch()).advantages
    # group 0, agent 0: the turns (ep0 t0, ep1 t0, ep1 t2, ep2 t0) with returns [1, 0, 0, 1]: mean 0.5,
    # unbiased std sqrt(1/3); agent 1: (ep0 t1, ep1 t1) with [1, 0]: mean 0.5, std sqrt(1/2)
    a0, a1 = 0.5 / (math.sqrt(1 / 3) + 1e-6), 0.5 / (math.sqrt(1 / 2) + 1e-6)
    # group 1: agent 1 alone with one turn: mean 0, std 1 -> 2 / (1 + 1e-6)
    want = tokens([[a0, a1], [-a0, -a1, -a0], [a0], [2 / (1 + 1e-6)]])
    assert torch.allclose(adv, want, atol=1e-6)


def test_without_std_and_without_agents():
    adv = ADVANTAGES["dr_mas"].bind({"norm_std": False})(batch()).advantages
    assert torch.allclose(adv, tokens([[0.5, 0.5], [-0.5, -0.5, -0.5], [0.5], [2.0]]), atol=1e-6)
    # no step_agents: every turn is agent 0; group 0's six turns [1, 1, 0, 0, 0, 1]: mean 0.5, std sqrt(0.3)
    adv = ADVANTAGES["dr_mas"].bind({})(batch(step_agents=None)).advantages
    a = 0.5 / (math.sqrt(0.3) + 1e-6)
    assert torch.allclose(adv, tokens([[a, a], [-a, -a, -a], [a], [2 / (1 + 1e-6)]]), atol=1e-6)


def test_step_agents_are_validated_and_needed_with_episodes():
    with pytest.raises(RolloutsError, match="step_agents must hold"):
        batch(step_agents=((0, -1), (0, 1, 0), (0,), (1,)))
    with pytest.raises(RolloutsError, match="step_agents must hold"):
        batch(step_agents=((0,), (0, 1, 0), (0,), (1,)))  # episode 0 has two turns
    single = Rollouts(prompt_ids=[torch.tensor([1])], completion_ids=torch.ones(1, 2, dtype=torch.long),
                      completion_mask=torch.ones(1, 2), behaviour_logprobs=torch.zeros(1, 2), group=torch.zeros(1, dtype=torch.long),
                      prompt_id=torch.zeros(1, dtype=torch.long), rewards=torch.ones(1, 1), reward_names=("r",))  # fmt: skip
    with pytest.raises(RolloutsError, match="rollout.strategy: episodes"):
        ADVANTAGES["dr_mas"].bind({})(single)
