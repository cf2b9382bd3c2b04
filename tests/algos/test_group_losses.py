"""The exact DisCO and TRPA surrogates: spec vectors, equality with the released losses on a policy that
has moved from pi_old (where the advantage form is off), equality with the advantage form at pi_old,
and the config rules (declared aggregation, advantage form refused with several updates)."""

import pytest
import torch
from _make import rollouts
from test_advantages_disco import released_objective
from test_advantages_trpa import released_loss

from covey.algos import ADVANTAGES, AGGREGATIONS, SURROGATES, LossInputs, batch_totals


def loss_of(name, logp, old, mask, group, row, ref=None, **params):
    """The surrogate's per-token loss reduced by seq-mean-token-mean over the given rows."""
    inp = LossInputs(logp, old, torch.zeros_like(mask), mask, group=torch.tensor(group), row=row, ref_logp=ref)
    tok, metrics = SURROGATES[name].bind(params)(inp)
    loss, _ = AGGREGATIONS["seq-mean-token-mean"].bind({})(tok * mask, mask, batch_totals(mask, mask.shape[1]))
    return loss, metrics


def one_token(values):
    """[N, 1] leaf log-probs with gradient, and an all-ones mask: the row score is the value itself."""
    x = torch.tensor(values, dtype=torch.float64)[:, None].requires_grad_(True)
    return x, torch.ones_like(x)


# ------------------------------------------------------------------------------------------ disco
def test_disco_spec_vector_value_and_gradient():
    # r = [1, 0, 0, 1], scores [-0.5, -1, -2, -0.8], tau 10: the code's value -(mean_pos s - tau) = 10.65;
    # d loss / d score = [-0.5, 0.525, 0.475, -0.5] (softmax over the negatives [0.5250, 0.4750])
    s, m = one_token([-0.5, -1.0, -2.0, -0.8])
    loss, metrics = loss_of("disco", s, s.detach(), m, [0] * 4, {"reward": torch.tensor([1.0, 0, 0, 1])})
    loss.backward()
    assert float(loss.detach()) == pytest.approx(10.65, abs=1e-5) and metrics["surrogate/valid_groups"] == 1.0
    assert s.grad[:, 0].tolist() == pytest.approx([-0.5, 0.5250, 0.4750, -0.5], abs=1e-4)


def test_disco_b_spec_vector():
    s, m = one_token([-0.5, -1.0, -2.0, -0.8])
    loss, _ = loss_of("disco", s, s.detach(), m, [0] * 4, {"reward": torch.tensor([1.0, 0, 0, 1])}, neg="mean")
    loss.backward()
    assert float(loss.detach()) == pytest.approx(-0.85) and s.grad[:, 0].tolist() == pytest.approx([-0.5, 0.5, 0.5, -0.5])


REWARDS = [1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3]  # group 2 all correct: invalid, counts in Q
LENGTHS = [3, 2, 4, 1, 2, 3, 4, 2, 3, 1, 2, 4]


def _moved_policy(seed=0):
    """pi_old's log-probs and a current policy that has moved away from them (a later mini-batch)."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(4)[None, :] < torch.tensor(LENGTHS)[:, None]).double()
    old = -torch.rand(len(REWARDS), 4, generator=gen, dtype=torch.float64) * 2 * mask
    cur = (old + 0.3 * torch.randn(old.shape, generator=gen, dtype=torch.float64)) * mask
    return old, cur.requires_grad_(True), mask


@pytest.mark.parametrize("neg", ["softmax", "mean"])
def test_disco_recomputes_the_released_loss_on_a_moved_policy(neg):
    old, cur, mask = _moved_policy()
    loss, _ = loss_of("disco", cur, old, mask, GROUPS, {"reward": torch.tensor(REWARDS, dtype=torch.float32)}, neg=neg)
    loss.backward()
    got = cur.grad.clone()
    cur.grad = None
    score = (cur * mask).sum(-1) / mask.sum(-1)  # the released logL score, current log-probs
    (-released_objective(score, REWARDS, GROUPS, 10.0, neg)).backward()
    assert torch.allclose(got, cur.grad, atol=1e-10)
    # the advantage form (reinforce on the estimator's A, taken at pi_old) gives another gradient here
    b = rollouts(REWARDS, groups=GROUPS, lengths=LENGTHS, width=4, logprobs=old.float().tolist())
    adv = ADVANTAGES["disco"].bind({"neg": neg})(b).advantages.double()
    approx = -adv[:, None] * mask / mask.sum(-1, keepdim=True) / len(REWARDS)  # d/d logp of mean_i -A_i mean_t logp
    if neg == "softmax":
        assert not torch.allclose(approx, got, atol=1e-4)


def test_disco_lratio_scores_the_mean_token_ratio():
    old, cur, mask = _moved_policy(1)
    row = {"reward": torch.tensor(REWARDS, dtype=torch.float32)}
    loss, _ = loss_of("disco", cur, old, mask, GROUPS, row, score="Lratio", tau=1.0)
    loss.backward()
    got = cur.grad.clone()
    cur.grad = None
    ratio = ((torch.exp(cur - old) * mask).sum(-1)) / mask.sum(-1)  # compute_policy_loss_disco_Lratio's score
    (-released_objective(ratio, REWARDS, GROUPS, 1.0, "softmax")).backward()
    assert torch.allclose(got, cur.grad, atol=1e-10)


@pytest.mark.parametrize("neg", ["softmax", "mean"])
def test_disco_at_pi_old_matches_the_advantage_form(neg):
    old, _, mask = _moved_policy(2)
    cur = old.clone().requires_grad_(True)
    loss, _ = loss_of("disco", cur, old, mask, GROUPS, {"reward": torch.tensor(REWARDS, dtype=torch.float32)}, neg=neg)
    loss.backward()
    b = rollouts(REWARDS, groups=GROUPS, lengths=LENGTHS, width=4, logprobs=old.float().tolist())
    adv = ADVANTAGES["disco"].bind({"neg": neg})(b).advantages.double()
    want = -adv[:, None] * mask / mask.sum(-1, keepdim=True) / len(REWARDS)
    assert torch.allclose(cur.grad, want, atol=1e-6)


def test_disco_needs_groups():
    s, m = one_token([-0.5, -1.0])
    inp = LossInputs(s, s.detach(), torch.zeros_like(m), m, row={"reward": torch.tensor([1.0, 0])})
    with pytest.raises(ValueError, match="LossInputs.group"):
        SURROGATES["disco"].bind({})(inp)


# ------------------------------------------------------------------------------------------ trpa
def test_trpa_spec_vector_value_and_gradient():
    # levels [1, 2, 1, 4], l = [0.10, -0.05, 0.02, 0.30] (ref 0), beta 0.1, anisotropy 2.5:
    # loss 0.7034, d loss / d l = [-0.0502, 0.0391, -0.0507, 0.0617]
    s, m = one_token([0.10, -0.05, 0.02, 0.30])
    row = {"col:level": torch.tensor([1.0, 2, 1, 4])}
    loss, metrics = loss_of("trpa", s, s.detach(), m, [0] * 4, row, ref=torch.zeros_like(m))
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.7034, abs=1e-4) and metrics["surrogate/pairs"] == 5
    assert s.grad[:, 0].tolist() == pytest.approx([-0.0502, 0.0391, -0.0507, 0.0617], abs=1e-4)


LEVELS = [1, 2, 1, 4, 2, 2, 3, 1, 1, 1, 3, 2]


def test_trpa_recomputes_the_released_loss_on_a_moved_policy():
    old, cur, mask = _moved_policy(3)
    ref = (old - 0.1) * mask
    row = {"col:level": torch.tensor(LEVELS, dtype=torch.float32)}
    loss, _ = loss_of("trpa", cur, old, mask, GROUPS, row, ref=ref)
    loss.backward()
    got = cur.grad.clone()
    cur.grad = None
    l = (cur * mask).sum(-1) / mask.sum(-1) - (ref * mask).sum(-1) / mask.sum(-1)
    released_loss(l, LEVELS, GROUPS, 0.1, 2.5).backward()
    assert torch.allclose(got, cur.grad, atol=1e-10)


def test_trpa_no_pair_falls_back_to_the_level_sign():
    # one level per group: -log sigmoid(+-l) over the rows, without beta (as released); the last row is a
    # group of one (the reference refuses those): it gets no loss and does not count in the mean
    s, m = one_token([0.4, -0.2, 0.1, 0.3, 5.0])
    row = {"col:level": torch.tensor([1.0, 1, 3, 3, 2])}
    loss, metrics = loss_of("trpa", s, s.detach(), m, [0, 0, 1, 1, 2], row, ref=torch.zeros_like(m))
    want = released_loss(torch.tensor([0.4, -0.2, 0.1, 0.3], dtype=torch.float64), [1, 1, 3, 3], [0, 0, 1, 1], 0.1, 2.5)
    assert metrics["surrogate/fallback"] == 1.0 and float(loss.detach()) == pytest.approx(float(want))


def test_trpa_at_pi_old_matches_the_advantage_form():
    old, _, mask = _moved_policy(4)
    cur = old.clone().requires_grad_(True)
    ref = (old - 0.1) * mask
    loss, _ = loss_of("trpa", cur, old, mask, GROUPS, {"col:level": torch.tensor(LEVELS, dtype=torch.float32)}, ref=ref)
    loss.backward()
    b = rollouts([[float(x == 1), float(x)] for x in LEVELS], groups=GROUPS, lengths=LENGTHS, width=4,
                 logprobs=old.float().tolist(), ref_logprobs=ref.float().tolist(), reward_names=["accuracy", "level"])  # fmt: skip
    adv = ADVANTAGES["trpa"].bind({})(b).advantages.double()
    assert torch.allclose(cur.grad, -adv[:, None] * mask / mask.sum(-1, keepdim=True) / len(LEVELS), atol=1e-6)


def test_trpa_names_a_missing_level_column():
    s, m = one_token([0.1, 0.2])
    with pytest.raises(ValueError, match="col:level"):
        loss_of("trpa", s, s.detach(), m, [0, 0], {"col:accuracy": torch.ones(2)}, ref=torch.zeros_like(m))


# ------------------------------------------------------------------------------------------ config rules
def _cfg(*overrides):
    from covey.train.config import load_config

    return load_config(None, ["model.name=tiny-llama", "task.name=arithmetic", *overrides])


def test_advantage_form_is_refused_with_several_updates():
    from covey.compat import check_algo

    with pytest.raises(ValueError, match="algo.surrogate: {name: disco}"):
        check_algo(_cfg("algo.advantage=disco", "algo.surrogate=reinforce", "algo.aggregation=seq-mean-token-mean",
                        "optim.mini_batches=2"))  # fmt: skip
    with pytest.raises(ValueError, match="algo.surrogate: {name: trpa}"):
        check_algo(_cfg("algo.advantage=trpa", "algo.surrogate=reinforce", "optim.epochs=2"))
    check_algo(_cfg("algo.advantage=disco", "algo.surrogate=reinforce", "algo.aggregation=seq-mean-token-mean"))  # one update
    check_algo(_cfg("algo.advantage=disco", "algo.surrogate=disco", "algo.aggregation=seq-mean-token-mean",
                    "optim.mini_batches=2"))  # fmt: skip


def test_exact_surrogates_declare_their_aggregation():
    from covey.compat import check_algo

    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        check_algo(_cfg("algo.surrogate=disco", "algo.aggregation=token-mean"))
