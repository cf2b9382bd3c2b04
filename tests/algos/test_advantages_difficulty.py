"""NGRPO, DGPO, A-GRAE and RiskPO: hand-computed vectors, options, edge cases."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError


def adv(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def close(a, b, tol=1e-5):
    return torch.allclose(a, torch.tensor(b, dtype=torch.float32), atol=tol, rtol=0)


# ---------------------------------------------------------------------------- ngrpo
@pytest.mark.parametrize(
    "rewards, expected",
    [
        # ext [0,0,0,0,1]: mean 0.2, std sqrt(0.2)=0.447214 -> -0.2/0.447215
        ([0, 0, 0, 0], [-0.447213] * 4),
        # ext [1,0,0,0,1]: mean 0.4, std 0.547723 -> 0.6/0.547724, -0.4/0.547724
        ([1, 0, 0, 0], [1.095443, -0.730295, -0.730295, -0.730295]),
        ([1, 1, 0, 0], [0.730295, 0.730295, -1.095443, -1.095443]),
        ([1, 1, 1, 1], [0, 0, 0, 0]),
    ],
)
def test_ngrpo_matches_spec_vectors(rewards, expected):
    assert close(adv("ngrpo", rollouts(rewards)).advantages, expected)


def test_ngrpo_more_virtual_rows_and_custom_max_reward():
    # ext [0,0,1,1]: mean 0.5, std sqrt(1/3) -> -0.866024
    assert close(adv("ngrpo", rollouts([0, 0]), num_virtual=2).advantages, [-0.866024, -0.866024])
    # max_reward 2: ext [1,1,2]: mean 4/3, std 0.57735 -> -0.57735
    assert close(adv("ngrpo", rollouts([1, 1]), max_reward=2.0).advantages, [-0.577349, -0.577349])


def test_ngrpo_singleton_options():
    assert adv("ngrpo", rollouts([0.0])).advantages.tolist() == [0.0]
    assert close(adv("ngrpo", rollouts([0.5]), singleton="raw").advantages, [0.5 / (1 + 1e-6)])


# ---------------------------------------------------------------------------- dgpo
@pytest.mark.parametrize(
    "rewards, expected",
    [
        # d = [0.75,-0.25,-0.25,-0.25], sum|d| = 1.5 -> 4 d / 1.5001
        ([1, 0, 0, 0], [1.999867, -0.666622, -0.666622, -0.666622]),
        ([1, 1, 0, 0], [0.99995, 0.99995, -0.99995, -0.99995]),
        ([1, 1, 1, 0], [0.666622, 0.666622, 0.666622, -1.999867]),
    ],
)
def test_dgpo_dgae_matches_spec_vectors(rewards, expected):
    assert close(adv("dgpo", rollouts(rewards)).advantages, expected)


def test_dgpo_question_weights_favour_harder_groups():
    # acc [0.25, 0.75], T=2: w = 2 softmax([-0.125, -0.375]) = [1.124353, 0.875647]
    batch = rollouts([1, 0, 0, 0, 1, 1, 1, 0], groups=[0, 0, 0, 0, 1, 1, 1, 1])
    w0, w1 = 1.124353, 0.875647
    expected = [1.999867 * w0] + [-0.666622 * w0] * 3 + [0.666622 * w1] * 3 + [-1.999867 * w1]
    assert close(adv("dgpo", batch).advantages, expected)
    assert close(adv("dgpo", batch, dqw=False).advantages, [1.999867] + [-0.666622] * 3 + [0.666622] * 3 + [-1.999867])


def test_dgpo_rescales_by_total_over_informative_tokens():
    # a zero-std third group holds 16 of 48 tokens -> rho = 48 / 32 = 1.5 ; its own A is 0
    batch = rollouts([1, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1], groups=[0] * 4 + [1] * 4 + [2] * 4)
    res = adv("dgpo", batch)
    plain = adv("dgpo", batch, rescale_informative=False)
    assert close(res.advantages, (1.5 * plain.advantages).tolist())
    assert torch.equal(res.advantages[8:], torch.zeros(4))
    assert res.metrics["adv/dgpo/informative_token_ratio"] == pytest.approx(1.5)


def test_dgpo_main_reward_column_and_zero_accuracy_replacement():
    # column "acc" is all 0 in group 0 (informative only through "fmt") -> acc := 1 (lowest weight)
    rows = [[0, 1], [0, 0], [0, 0], [0, 0], [1, 0], [0, 0], [0, 0], [0, 0]]
    batch = rollouts(rows, groups=[0] * 4 + [1] * 4, reward_names=["acc", "fmt"])
    e0, e1 = math.exp(-1 / 2), math.exp(-0.25 / 2)
    w = [2 * e0 / (e0 + e1), 2 * e1 / (e0 + e1)]
    dgae = [1.999867, -0.666622, -0.666622, -0.666622]
    assert close(adv("dgpo", batch).advantages, [x * w[0] for x in dgae] + [x * w[1] for x in dgae])
    # main_reward="fmt": group 0 acc 0.25, group 1 acc 0 -> 1: weights swap
    assert close(adv("dgpo", batch, main_reward="fmt").advantages, [x * w[1] for x in dgae] + [x * w[0] for x in dgae])
    with pytest.raises(RolloutsError, match="main_reward='nope' is not a reward column"):
        adv("dgpo", batch, main_reward="nope")


def test_dgpo_all_groups_constant_gives_zero():
    res = adv("dgpo", rollouts([1, 1, 0, 0], groups=[0, 0, 1, 1]))
    assert torch.equal(res.advantages, torch.zeros(4))
    assert res.metrics["adv/dgpo/informative_groups"] == 0.0


# ---------------------------------------------------------------------------- a_grae
def test_a_grae_matches_spec_vectors_with_batch_accuracy_one_half():
    # p = 0.75 and 0.25 -> pbar 0.5. Group 1: A0 = [0.5]*3 + [-1.5]; sqrt p = 0.866025
    #   A_diff = 0.25/0.866026, A_easy = 0.25/0.133976 -> A = 0.5*(sum) = 1.077350, x min(1, 0.5) = 0.538675
    # Group 2: sqrt p = 0.5 -> A_diff = A_easy = A0 -> 0.75 (positive, halved) and -0.5
    batch = rollouts([1, 1, 1, 0, 1, 0, 0, 0], groups=[0] * 4 + [1] * 4)
    expected = [0.538670] * 3 + [-3.232023] + [0.749997] + [-0.499998] * 3
    assert close(adv("a_grae", batch).advantages, expected)
    assert adv("a_grae", batch).metrics["adv/a_grae/pbar"] == pytest.approx(0.5)


def test_a_grae_alpha_controls_the_suppression_of_positive_advantages():
    batch = rollouts([1, 1, 1, 0, 1, 0, 0, 0], groups=[0] * 4 + [1] * 4)
    # alpha 0.25: min(1, 0.5/0.25) = 1 -> positives not suppressed
    assert close(adv("a_grae", batch, alpha=0.25).advantages[:1], [1.077340])
    # all-correct and all-wrong groups give 0
    assert torch.equal(adv("a_grae", rollouts([1, 1, 0, 0], groups=[0, 0, 1, 1])).advantages, torch.zeros(4))


def test_a_grae_rejects_negative_accuracies():
    with pytest.raises(RolloutsError, match="rewards in \\[0, 1\\]"):
        adv("a_grae", rollouts([-1, -1, 0]))


# ---------------------------------------------------------------------------- riskpo
def test_riskpo_matches_spec_bundle_vector():
    # q0=[1,0,1], q1=[0,0,1] -> papers S=[1,0,2]; a=q0.2=0.4, b=q0.9=1.8; std(S)=1
    # RVaR=[-1.142856,-1.999997,0], CVaR=[0,-1.99999,0], adv_p=[-0.457142,-1.999991,0]
    # credit std: std_q = 0.57735 for both questions
    batch = rollouts([1, 0, 1, 0, 0, 1], groups=[0, 0, 0, 1, 1, 1])
    expected = [-0.791791, -3.464080, 0] * 2
    assert close(adv("riskpo", batch).advantages, expected, tol=2e-5)
    assert close(adv("riskpo", batch, credit="uniform").advantages, [-0.457142, -1.999991, 0] * 2, tol=2e-5)


def test_riskpo_bundles_groups_by_first_appearance():
    # bundle_size 2 over groups appearing as 9, 4, 7 -> bundles {9, 4} and {7}
    r = [1, 0, 1, 0, 0, 1, 0.5, 1, 0]
    g = [9, 4, 9, 4, 9, 4, 7, 7, 7]
    both = adv("riskpo", rollouts(r, groups=g), bundle_size=2).advantages
    first = adv("riskpo", rollouts(r[:6], groups=g[:6])).advantages
    alone = adv("riskpo", rollouts(r[6:], groups=g[6:])).advantages
    assert close(both, first.tolist() + alone.tolist())


def test_riskpo_rows_beyond_the_smallest_group_get_zero():
    batch = rollouts([1, 0, 1, 0.5, 0, 0, 1], groups=[0, 0, 0, 0, 1, 1, 1])
    res = adv("riskpo", batch)
    assert res.advantages[3] == 0.0
    assert res.metrics["adv/riskpo/unbundled_rows"] == 1.0


def test_riskpo_constant_papers_and_single_paper_bundles_give_zero():
    assert torch.equal(adv("riskpo", rollouts([1, 1, 0, 0], groups=[0, 0, 1, 1])).advantages, torch.zeros(4))
    assert torch.equal(adv("riskpo", rollouts([1.0])).advantages, torch.zeros(1))


def test_riskpo_rejects_alpha_above_beta():
    with pytest.raises(RolloutsError, match="alpha <= beta"):
        adv("riskpo", rollouts([1, 0]), alpha=0.9, beta=0.2)
