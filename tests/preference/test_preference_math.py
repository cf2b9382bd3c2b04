"""Preference losses and pair builders: test vectors (XPO, RSO, GEPO, TGDPO) and hand-computed cases."""

import math

import pytest
import torch

from covey.preference import PAIRS, PREFERENCE_LOSSES, PrefInputs, rso_accept
from covey.rollouts import Rollouts


def _inputs(logp_rows, ref_rows, chosen, rejected, group=None, preferred=None, guide=None, explore=None):
    logp = torch.tensor(logp_rows, dtype=torch.float64)
    ref = torch.tensor(ref_rows, dtype=torch.float64)
    n = logp.shape[0]
    return PrefInputs(
        logp=logp, ref_logp=ref, mask=torch.ones_like(logp), chosen=torch.tensor(chosen), rejected=torch.tensor(rejected),
        group=torch.tensor(group if group is not None else [0] * n),
        preferred=torch.tensor(preferred if preferred is not None else [False] * n),
        guide_logp=None if guide is None else torch.tensor(guide, dtype=torch.float64),
        explore=None if explore is None else torch.tensor(explore),
    )  # fmt: skip


def _call(name, inp, **params):
    return PREFERENCE_LOSSES.get(name).bind(params)(inp)


def test_xpo_spec_vector():
    # S_m(y) = -10, S_r(y) = -11, S_m(y~) = -12, S_r(y~) = -11.5; y (policy) chosen
    inp = _inputs([[-4.0, -6.0], [-5.0, -7.0]], [[-5.0, -6.0], [-5.5, -6.0]], [0], [1], explore=[False, True])
    loss, m = _call("xpo", inp, beta=0.1, alpha=1e-5)
    assert loss.item() == pytest.approx(0.620837, abs=1e-6)
    assert m["xpo_loss"] == pytest.approx(-0.00012)
    dpo, _ = _call("dpo", inp, beta=0.1)
    assert dpo.item() == pytest.approx(0.6210, abs=1e-4)  # -log sigmoid(0.15)
    assert loss.item() - dpo.item() == pytest.approx(1e-5 * -12)


def test_xpo_bonus_follows_the_reference_row_whichever_side_it_is_on():
    inp = _inputs([[-4.0, -6.0], [-5.0, -7.0]], [[-5.0, -6.0], [-5.5, -6.0]], [1], [0], explore=[False, True])
    loss, _ = _call("xpo", inp, beta=0.1, alpha=1.0)
    assert loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(0.15))) - 12.0)  # logits -1.5; bonus on row 1 (-12)
    with pytest.raises(ValueError, match="one policy and one reference"):
        _call("xpo", _inputs([[-1.0], [-2.0]], [[-1.0], [-1.0]], [0], [1], explore=[True, True]))


@pytest.mark.parametrize("loss_type,want", [("hinge", [0.0, 0.5, 1.5]), ("sigmoid", [0.3133, 0.4741, 0.9741])])
def test_rso_losses_spec_vector(loss_type, want):
    # pair logits 2, 1, -1 (chosen sums minus rejected sums), beta 0.5
    inp = _inputs([[2.0], [0.0], [1.0], [0.0], [-1.0], [0.0]], [[0.0]] * 6, [0, 2, 4], [1, 3, 5])
    loss, _ = _call("dpo", inp, beta=0.5, loss_type=loss_type)
    assert loss.tolist() == pytest.approx(want, abs=1e-4)


def test_ipo_loss():
    inp = _inputs([[2.0], [0.0]], [[0.0], [0.0]], [0], [1])
    loss, _ = _call("dpo", inp, beta=0.5, loss_type="ipo")
    assert loss.item() == pytest.approx((2 - 1 / (2 * 0.5)) ** 2)


def test_rso_accept_spec_vector_and_rounds():
    draws = iter([0.3, 0.1, 0.4])
    assert rso_accept([0.2, 0.9, 0.5], 0.5, 2, lambda: next(draws)) == [1, 2]  # probs 0.2466, 1, 0.4493
    # n = 3: round 1 takes {1, 2}; round 2's r_max is 0.2, so candidate 0 is accepted with probability 1
    draws = iter([0.3, 0.1, 0.4, 0.99])
    assert rso_accept([0.2, 0.9, 0.5], 0.5, 3, lambda: next(draws)) == [1, 2, 0]  # acceptance order
    draws = iter([0.9, 0.9, 0.9])  # only the arg-max passes
    assert rso_accept([0.2, 0.9, 0.5], 0.5, 1, lambda: next(draws)) == [1]
    with pytest.raises(ValueError):
        rso_accept([1.0], 0.0, 1, lambda: 0.0)


def test_tgdpo_spec_vector_and_alpha_zero_is_dpo():
    inp = _inputs([[-1.0, -2.0], [-1.5, -0.5]], [[-1.2, -1.5], [-1.0, -0.7]], [0], [1],
                  guide=[[-0.8, -1.6], [-1.4, -0.9]])  # fmt: skip
    loss, _ = _call("tgdpo", inp, beta=0.1, alpha=0.5)
    assert loss.item() == pytest.approx(0.6924, abs=1e-4)
    logit = -math.log(math.exp(loss.item()) - 1)  # loss = -log sigmoid(logit)
    assert logit == pytest.approx(0.001450, abs=2e-6)
    plain, _ = _call("tgdpo", inp, beta=0.1, alpha=0.0)
    dpo, _ = _call("dpo", inp, beta=0.1)
    assert plain.item() == pytest.approx(dpo.item()) == pytest.approx(0.6931, abs=1e-4)


def test_gepo_spec_vector_and_groups_without_both_sides():
    # rho_E = [0.5, 0.3, 0.4], rho_I = [-0.2, 0.1]; a second group has only preferred rows (no unit)
    rho = [0.5, 0.3, 0.4, -0.2, 0.1, 0.7]
    inp = _inputs([[r] for r in rho], [[0.0]] * 6, [], [], group=[0, 0, 0, 0, 0, 1],
                  preferred=[True, True, True, False, False, True])  # fmt: skip
    loss, m = _call("gepo_provisional", inp, beta=0.1, lam=1.0)
    assert loss.tolist() == pytest.approx([0.6776], abs=1e-4)
    assert m["accuracy"] == 1.0


def _batch(rewards, group, items=None):
    n = len(rewards)
    return Rollouts(prompt_ids=[torch.tensor([1])] * n, completion_ids=torch.ones(n, 1, dtype=torch.long),
                    completion_mask=torch.ones(n, 1), behaviour_logprobs=torch.zeros(n, 1), group=torch.tensor(group),
                    prompt_id=torch.tensor(group), rewards=torch.tensor(rewards)[:, None], items=items)  # fmt: skip


def _pairs(name, batch, seed=0, **params):
    return PAIRS.get(name).bind(params)(batch, torch.Generator().manual_seed(seed))


def test_best_worst_first_of_equals_and_no_pair_without_preference():
    p = _pairs("best_worst", _batch([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5], [0, 0, 0, 0, 1, 1, 1]))
    assert (p.chosen, p.rejected) == ([0], [1])
    assert p.metrics == {"pairs": 1.0, "groups_without_pair_frac": 0.5}


def test_all_pairs():
    p = _pairs("all_pairs", _batch([1.0, 0.0, 0.5], [0, 0, 0]))
    assert sorted(zip(p.chosen, p.rejected)) == [(0, 1), (0, 2), (2, 1)]


def test_rso_pairs_follow_accepted_order_and_seed():
    batch = _batch([0.2, 0.9, 0.5, 0.9, 0.1, 0.3], [0, 0, 0, 1, 1, 1])
    a = _pairs("rso", batch, seed=3, beta_rs=0.5, accept=2)
    b = _pairs("rso", batch, seed=3, beta_rs=0.5, accept=2)
    assert (a.chosen, a.rejected) == (b.chosen, b.rejected)
    assert a.metrics["accepted_frac"] == pytest.approx(4 / 6)
    r = batch.scalar_rewards()
    for c, j in zip(a.chosen, a.rejected):
        assert batch.group[c] == batch.group[j] and r[c] > r[j]
    assert 1 in a.chosen and 3 in a.chosen  # each group's arg-max is accepted in the first round
    with pytest.raises(ValueError, match="accept"):
        _pairs("rso", batch, accept=1)


def test_xpo_pairs_tie_prefers_the_policy_sample():
    items = [{"id": 0}, {"id": 0}, {"id": 0, "reference_sample": True}]
    p = _pairs("xpo", _batch([0.0, 1.0, 0.0], [0, 0, 0], items))
    assert sorted(zip(p.chosen, p.rejected)) == [(0, 2), (1, 2)]  # 0 ties the reference: policy chosen
    p = _pairs("xpo", _batch([0.0, 1.0], [0, 0], [{"id": 0}, {"id": 0, "reference_sample": True}]))
    assert (p.chosen, p.rejected) == ([1], [0])


def test_sets_marks_preferred_rows():
    p = _pairs("sets", _batch([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]), threshold=1.0)
    assert p.preferred == [True, False, True, True] and p.metrics["groups_without_pair_frac"] == 0.5


def test_bad_loss_type_is_a_clear_error():
    with pytest.raises(ValueError, match="loss_type"):
        _call("dpo", _inputs([[1.0], [0.0]], [[0.0], [0.0]], [0], [1]), loss_type="kto")
