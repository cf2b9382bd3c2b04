"""disco: hand-checked test vectors, gradient equivalence with the released loss, edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES


def run(batch, **params):
    return ADVANTAGES["disco"].bind(params)(batch)


SPEC = dict(rewards=[1, 0, 0, 1], scores=[-0.5, -1.0, -2.0, -0.8])


def released_objective(scores, rewards, groups, tau, neg):
    """Transcription of DisCO's J (compute_policy_loss_disco_logL / discob): sum over valid groups / Q."""
    total = scores.new_zeros(())
    q = len(set(groups))
    for gid in sorted(set(groups)):
        rows = [i for i, x in enumerate(groups) if x == gid]
        pos = [i for i in rows if rewards[i] == 1]
        negs = [i for i in rows if rewards[i] == 0]
        if not pos or not negs:
            continue
        neg_term = tau * torch.logsumexp(scores[negs] / tau, 0) if neg == "softmax" else scores[negs].mean()
        total = total + scores[pos].mean() - neg_term
    return total / q


def test_spec_vector_disco_and_disco_b():
    b = rollouts(SPEC["rewards"], logprobs=SPEC["scores"])
    assert torch.allclose(run(b).advantages, torch.tensor([2.0, -2.0999, -1.9001, 2.0]), atol=1e-4)
    assert torch.allclose(run(b, neg="mean").advantages, torch.tensor([2.0, -2.0, -2.0, 2.0]), atol=1e-6)
    s = torch.tensor(SPEC["scores"], dtype=torch.float64)
    assert float(released_objective(s, SPEC["rewards"], [0] * 4, 10.0, "softmax")) == pytest.approx(-6.0940, abs=1e-4)
    assert float(released_objective(s, SPEC["rewards"], [0] * 4, 10.0, "mean")) == pytest.approx(0.85)


@pytest.mark.parametrize("neg", ["softmax", "mean"])
@pytest.mark.parametrize("tau", [10.0, 1.0])
def test_gradient_equals_the_released_objective(neg, tau):
    rewards = [1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0]
    groups = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3]  # group 2 all correct, group 3 one row: invalid, count in Q
    lengths = [3, 2, 4, 1, 2, 3, 4, 2, 3, 1, 2]
    scores = [-0.5, -1.0, -2.0, -0.8, -0.3, -0.9, -1.7, -0.2, -1.0, -0.4, -0.6]
    b = rollouts(rewards, groups=groups, lengths=lengths, width=4, logprobs=scores)
    s = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    (-released_objective(s, rewards, groups, tau, neg)).backward()
    n_seq = len(rewards)
    # covey: reinforce + seq-mean-token-mean -> d loss / d score_i = -A_i / N_seq
    assert torch.allclose(run(b, tau=tau, neg=neg).advantages.double(), -n_seq * s.grad, atol=1e-6)


def test_softmax_variant_is_drpo_without_length_weight():
    b = rollouts([1, 0, 0, 1, 0, 1], groups=[0, 0, 0, 1, 1, 1], lengths=[2, 3, 1, 3, 2, 1], width=3,
                 logprobs=[-0.5, -1.0, -2.0, -0.8, -0.1, -3.0])  # fmt: skip
    drpo = ADVANTAGES["drpo"].bind({"length_weight": False})(b).advantages
    assert torch.allclose(run(b).advantages, drpo, atol=1e-6)


def test_edge_cases():
    b = rollouts([1, 0, 0.5, 1], groups=[0, 0, 1, 1], logprobs=-1.0)  # group 1 non-binary -> invalid, counts in Q
    res = run(b)
    assert torch.allclose(res.advantages, torch.tensor([2.0, -2.0, 0.0, 0.0]))  # N_seq / Q = 4 / 2
    assert res.metrics["adv/disco/valid_groups"] == 0.5 and res.metrics["adv/disco/non_binary_frac"] == 0.25
    assert torch.equal(run(rollouts([1.0, 0.0], groups=[3, 9])).advantages, torch.zeros(2))  # G = 1
    assert torch.equal(run(rollouts([1.0] * 4)).advantages, torch.zeros(4))  # all correct
    empty = rollouts([1, 0, 0, 1], lengths=[3, 0, 3, 0], width=3, logprobs=-1.0)  # empty rows in neither set
    assert torch.allclose(run(empty).advantages, torch.tensor([2.0, 0.0, -2.0, 0.0]))  # N_seq = 2, Q = 1
    with pytest.raises(Exception, match="parameter 'neg'"):
        ADVANTAGES["disco"].bind({"neg": "max"})
