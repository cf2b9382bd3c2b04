"""GTPO, DRPO and BRPO: hand-computed vectors, loss/gradient equivalences, edge cases."""

import math

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES, AGGREGATIONS, SURROGATES, LossInputs
from covey.algos.advantages.token_credit import _conflict_masks
from covey.algos.aggregation import batch_totals
from covey.rollouts import RolloutsError


def adv(name, batch, **params):
    return ADVANTAGES[name].bind(params)(batch)


def close(a, b, tol=1e-5):
    return torch.allclose(a, torch.as_tensor(b, dtype=torch.float32), atol=tol, rtol=0)


def covey_grad(logp, mask, advantages):
    """Gradient of surrogate "reinforce" + aggregation "seq-mean-token-mean" w.r.t. logp [N, T]."""
    a = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(logp)
    inp = LossInputs(logp=logp, old_logp=logp.detach(), advantages=a, mask=mask)
    loss_tok, _ = SURROGATES["reinforce"].bind()(inp)
    loss, _ = AGGREGATIONS["seq-mean-token-mean"].bind()(loss_tok, mask, batch_totals(mask, logp.shape[1]))
    (g,) = torch.autograd.grad(loss, logp)
    return g


# ---------------------------------------------------------------------------- gtpo
SPEC_IDS = [[5, 7, 9, 2], [5, 7, 8, 2], [6, 7, 9, 2]]


def test_gtpo_conflict_masks_match_spec_vector():
    ids = torch.tensor(SPEC_IDS)
    fwd, bwd = _conflict_masks(ids, torch.ones(3, 4, dtype=torch.bool), torch.zeros(3, dtype=torch.long),
                               torch.tensor([True, False, False]), torch.tensor([False, True, True]))
    assert fwd.long().tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert bwd.long().tolist() == [[1, 1, 1, 1], [0, 0, 0, 1], [0, 1, 1, 1]]


def test_gtpo_conflict_keys_fast_path_matches_the_wide_key_fallback():
    # relabelling token 9 as 2**61 makes the id range overflow the packed int64 key, so the
    # unique(dim=0) fallback runs; a consistent relabelling must give the same masks
    ids = torch.tensor(SPEC_IDS)
    wide = torch.where(ids == 9, torch.full_like(ids, 2**61), ids)
    args = (torch.ones(3, 4, dtype=torch.bool), torch.zeros(3, dtype=torch.long),
            torch.tensor([True, False, False]), torch.tensor([False, True, True]))
    for a, b in zip(_conflict_masks(ids, *args), _conflict_masks(wide, *args)):
        assert torch.equal(a, b)


def test_gtpo_token_advantages_are_grpo_times_delta_over_conflict_count():
    # r = [1,0,0] -> A = [1.154601, -0.577300, -0.577300] (eps 1e-4)
    # delta = [[4,4,4,4],[0,0,1,0],[1,0,0,0]], n_conf = [4,3,3]
    res = adv("gtpo", rollouts([1, 0, 0], ids=SPEC_IDS), entropy_filter=False)
    a_pos, a_neg = 2 / 3 / (0.5773503 + 1e-4), -1 / 3 / (0.5773503 + 1e-4)
    expected = [[a_pos] * 4, [0, 0, a_neg / 3, 0], [a_neg / 3, 0, 0, 0]]
    assert res.advantages.shape == (3, 4)
    assert close(res.advantages, expected)


def test_gtpo_backward_conflicts_align_rows_at_their_last_token():
    # pos [4,5,6,7], neg [8,6,7]: from the end 7 and 6 match, 5 vs 8 does not
    batch = rollouts([1, 0], ids=[[4, 5, 6, 7], [8, 6, 7, 0]], lengths=[4, 3])
    res = adv("gtpo", batch, entropy_filter=False, scale="none")
    # A = [0.5, -0.5]; delta pos = [1,1,2,2], n=2 ; delta neg = [1,0,0,(pad)], n=2
    assert close(res.advantages, [[0.25, 0.25, 0.5, 0.5], [-0.25, 0, 0, 0]])


def test_gtpo_entropy_filter_shapes_low_entropy_rows_and_drops_high_entropy_rows():
    # H = [0.5, 0.9, 0.2]: row 1 filtered (A' = 0); row 0: A - 0.1*0.5 ; row 2: A - 0.1*0.2
    batch = rollouts([1, 0, 0], ids=[[1, 2], [3, 4], [5, 6]], entropies=[0.5, 0.9, 0.2])
    res = adv("gtpo", batch)
    a_pos, a_neg = 2 / 3 / (0.5773503 + 1e-4), -1 / 3 / (0.5773503 + 1e-4)
    assert close(res.advantages, [[a_pos - 0.05] * 2, [0, 0], [a_neg - 0.02] * 2])
    assert res.metrics["adv/gtpo/entropy_filtered_frac"] == pytest.approx(1 / 3)
    with pytest.raises(RolloutsError, match="needs rollouts.entropies"):
        adv("gtpo", rollouts([1, 0]))


def test_gtpo_zero_advantage_rows_get_only_the_entropy_term():
    res = adv("gtpo", rollouts([1, 1], entropies=[0.3, 0.3], lengths=[2, 2]))
    assert close(res.advantages, [[-0.03, -0.03], [-0.03, -0.03]])


def test_gtpo_with_seq_mean_token_mean_reproduces_released_loss_gradient_over_n():
    torch.manual_seed(0)
    ids = [[5, 7, 9, 2, 1], [5, 7, 8, 2, 0], [6, 7, 9, 2, 3], [1, 2, 3, 4, 5], [1, 2, 9, 9, 0], [7, 7, 7, 7, 7]]
    lengths = [4, 4, 5, 5, 3, 2]
    batch = rollouts([1, 0, 0, 1, 0, 1], groups=[0, 0, 0, 1, 1, 1], ids=ids, lengths=lengths, entropies=[0.2, 0.4, 0.6, 0.1, 0.3, 0.8])
    res = adv("gtpo", batch)
    a = res.advantages.double()
    mask = batch.completion_mask.double()
    logp = (-torch.rand(6, 5, dtype=torch.float64)).requires_grad_(True)
    # released: sum_i [sum_t -(A'_i delta_it) ratio_it mask / L_i] / n_i  ==  sum_i sum_t -a_it ratio_it / L_i
    ratio = torch.exp(logp - logp.detach())
    released = (-(a * ratio * mask).sum(-1) / mask.sum(-1)).sum()
    (g_ref,) = torch.autograd.grad(released, logp)
    assert torch.allclose(covey_grad(logp, mask, a) * 6, g_ref)


# ---------------------------------------------------------------------------- drpo
def test_drpo_positive_weights_match_spec_vector():
    # lengths [1000,2000,4000], Lmax 8192, lambda 0.1: w = exp((1 - L/8192)/0.1) -> P = [0.757174,0.223383,0.019443]
    # one negative (softmax = 1); N_seq / Q = 4 / 1
    batch = rollouts([1, 1, 1, 0], lengths=[1000, 2000, 4000, 500])
    res = adv("drpo", batch, max_len=8192)
    assert close(res.advantages, [4 * 0.757174, 4 * 0.223383, 4 * 0.019443, -4.0], tol=2e-5)


def test_drpo_negative_weights_are_a_softmax_of_scores_over_tau():
    # negatives with length-normalised scores [-1, -3]: softmax([-0.1, -0.3]) ; positives uniform w/o length weight
    batch = rollouts([1, 1, 0, 0], logprobs=[-0.5, -0.7, -1.0, -3.0], lengths=[2, 2, 2, 2])
    res = adv("drpo", batch, length_weight=False)
    e1, e2 = math.exp(-0.1), math.exp(-0.3)
    assert close(res.advantages, [4 * 0.5, 4 * 0.5, -4 * e1 / (e1 + e2), -4 * e2 / (e1 + e2)])


def test_drpo_invalid_groups_and_non_binary_rewards_get_zero():
    # group 0 all correct (invalid), group 1 has a 0.5 reward (neither set) -> valid via rows 3 and 5
    batch = rollouts([1, 1, 1, 0.5, 0], groups=[0, 0, 1, 1, 1])
    res = adv("drpo", batch)
    assert res.advantages[:2].tolist() == [0.0, 0.0] and res.advantages[3] == 0.0
    assert res.metrics["adv/drpo/valid_groups"] == 0.5


def _released_drpo_pg_loss(logp, mask, uid, rewards, tau, lam):
    """Transcription of Optimization-AI/DRPO `compute_policy_loss_drpo` (pg part, one process)."""
    scores = (logp * mask).sum(1) / mask.sum(1)
    length_ratio = mask.sum(1) / mask.size(-1)
    _, idx = uid.sort()
    q = uid.unique().numel()
    s = scores[idx].view(q, -1)
    r = rewards[idx].view(q, -1)
    lr = length_ratio[idx].view(q, -1)
    pos, neg = r == 1, r == 0
    valid = (pos.sum(1) != 0) & (neg.sum(1) != 0)
    s, lr, pos, neg = s[valid], lr[valid], pos[valid], neg[valid]
    masked = (s / tau).masked_fill(~neg, float("-inf"))
    nmax, _ = masked.max(dim=-1, keepdim=True)
    nexp = torch.exp(((s / tau) - nmax.detach()) * neg) * neg
    nsum = nexp.sum(dim=-1, keepdim=True)
    nlme = nsum / (nsum.detach() + torch.finfo(nsum.dtype).eps)
    w = torch.exp((1 - lr) / lam)
    pg = (w * (s - tau * nlme) * pos).sum(1, keepdim=True) / (w * pos).sum(1, keepdim=True)
    return -pg.sum() / q


def test_drpo_advantage_gives_the_released_loss_gradient_on_policy():
    torch.manual_seed(1)
    lengths = [3, 6, 2, 5, 4, 6, 1, 6, 2, 3, 6, 4]
    rewards = [1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0]  # group 2 is all wrong: invalid, yet counted in Q = 3
    groups = [0] * 4 + [1] * 4 + [2] * 4
    logp = (-2 * torch.rand(12, 6, dtype=torch.float64)).requires_grad_(True)
    batch = rollouts(rewards, groups=groups, lengths=lengths, logprobs=logp.detach().float().tolist())
    mask = batch.completion_mask.double()
    a = adv("drpo", batch, tau=10.0, lam=0.1).advantages.double()
    loss = _released_drpo_pg_loss(logp, mask, batch.group, batch.rewards[:, 0].double(), 10.0, 0.1)
    (g_ref,) = torch.autograd.grad(loss, logp)
    assert torch.allclose(covey_grad(logp, mask, a), g_ref, atol=1e-6)


# ---------------------------------------------------------------------------- brpo
def test_brpo_picks_one_excluded_reference_per_group_and_compares_with_it():
    r = [0.2, 0.9, 0.5, 0.4, 1.0, 0.0, 0.3]
    g = [3, 3, 3, 8, 8, 8, 11]
    res = adv("brpo", rollouts(r, groups=g), seed=7)
    keep = res.sample_mask.tolist()
    refs = [i for i, k in enumerate(keep) if k == 0]
    assert len(refs) == 3 and 6 in refs  # one per group; the singleton is its own reference
    ref_of = {g[i]: r[i] for i in refs}
    for i in range(7):
        expected = 0.0 if keep[i] == 0 else r[i] - ref_of[g[i]]
        assert res.advantages[i].item() == pytest.approx(expected, abs=1e-6)


def test_brpo_is_reproducible_for_a_seed_and_sign_option_gives_verdicts():
    batch = rollouts([0.2, 0.9, 0.5, 0.5], groups=[1, 1, 1, 1])
    a = adv("brpo", batch, seed=3)
    b = adv("brpo", batch, seed=3)
    assert torch.equal(a.advantages, b.advantages) and torch.equal(a.sample_mask, b.sample_mask)
    s = adv("brpo", batch, seed=3, compare="sign").advantages
    assert torch.equal(s, torch.sign(a.advantages))
    refs = {tuple(adv("brpo", batch, seed=k).sample_mask.tolist()) for k in range(20)}
    assert len(refs) > 1  # different seeds draw different references
