"""Sampling math: truncation filters on hand-made logits, inverse-CDF draws, reported log-probs."""

import math

import pytest
import torch

from covey.engine.sampling import filter_logits, inverse_cdf, sample_tokens, validate_sampling


def _kept(logits):
    return torch.isfinite(logits).nonzero().flatten().tolist()


def _logits(probs):
    return torch.tensor(probs).log()[None]


def test_top_k_keeps_the_k_largest_and_ties_with_the_kth():
    assert _kept(filter_logits(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), top_k=2)[0]) == [1, 2]
    assert _kept(filter_logits(torch.tensor([[2.0, 2.0, 0.0]]), top_k=1)[0]) == [0, 1]
    assert _kept(filter_logits(torch.tensor([[1.0, 3.0]]), top_k=5)[0]) == [0, 1]  # k >= V: no-op


def test_top_p_keeps_smallest_prefix_reaching_the_mass():
    logits = _logits([0.5, 0.25, 0.15, 0.1])
    # mass ranked above each token: 0, 0.5, 0.75, 0.9 -> dropped when already >= top_p
    assert _kept(filter_logits(logits, top_p=0.8)[0]) == [0, 1, 2]
    assert _kept(filter_logits(logits, top_p=0.6)[0]) == [0, 1]
    assert _kept(filter_logits(logits, top_p=0.3)[0]) == [0]  # the best token always survives


def test_top_p_falls_back_to_full_sort_for_flat_distributions():
    v = 3000  # more than the 1024-token prefix top-p looks at first
    logits = torch.zeros(1, v)
    logits[0, 7] = 1.0
    kept = _kept(filter_logits(logits, top_p=0.9)[0])
    # p_7 = e / (e + 2999), others 1 / (e + 2999); need ceil((0.9 (e+2999) - e)) more tokens after 7
    e = math.e
    expected = 1 + math.ceil(0.9 * (e + v - 1) - e)
    assert 7 in kept and abs(len(kept) - expected) <= 1


def test_min_p_drops_tokens_below_fraction_of_the_best():
    logits = _logits([0.5, 0.25, 0.15, 0.1])
    assert _kept(filter_logits(logits, min_p=0.4)[0]) == [0, 1]  # threshold 0.4 * 0.5 = 0.2
    assert _kept(filter_logits(logits, min_p=0.1)[0]) == [0, 1, 2, 3]  # threshold 0.05


def test_filters_apply_in_order_top_k_then_top_p():
    logits = _logits([0.4, 0.3, 0.2, 0.1])
    # top_p alone: mass above = 0, .4, .7, .9 -> keep 3 tokens at 0.75
    assert _kept(filter_logits(logits, top_p=0.75)[0]) == [0, 1, 2]
    # top_k=3 first renormalises to .444, .333, .222: mass above = 0, .444, .777 -> keep 2
    assert _kept(filter_logits(logits, top_k=3, top_p=0.75)[0]) == [0, 1]


def test_filter_logits_leaves_input_unchanged():
    logits = _logits([0.4, 0.3, 0.2, 0.1])
    before = logits.clone()
    filter_logits(logits, top_k=1)
    assert torch.equal(logits, before)


def test_inverse_cdf_on_a_uniform_grid_hits_exact_counts():
    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).repeat(8, 1)
    u = (torch.arange(8) + 0.5) / 8  # one draw per eighth of the unit interval
    assert torch.bincount(inverse_cdf(probs, u), minlength=4).tolist() == [4, 2, 1, 1]


def test_inverse_cdf_across_blocks_matches_probabilities():
    torch.manual_seed(0)
    v, m = 700, 20000  # 700 = 2 full blocks of 256 + a partial one
    probs = torch.rand(v) ** 4
    probs[[3, 300, 650]] = 0.0
    probs /= probs.sum()
    u = (torch.arange(m, dtype=torch.float64) + 0.5) / m
    counts = torch.bincount(inverse_cdf(probs[None].repeat(m, 1), u.float()), minlength=v).float()
    assert counts[[3, 300, 650]].sum() == 0
    assert (counts - probs * m).abs().max() <= 2.0  # grid draws: off by rounding only


def test_inverse_cdf_never_returns_zero_probability_token():
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    assert inverse_cdf(probs, torch.tensor([0.99999994])).item() == 1
    assert inverse_cdf(probs, torch.tensor([0.0])).item() == 0


def test_sample_tokens_reports_tempered_full_distribution_logprobs_and_entropy():
    torch.manual_seed(1)
    logits = torch.randn(5, 300) * 3
    u = torch.rand(5)
    for temp in (1.0, 0.6):
        tok, logp, ent = sample_tokens(logits, temperature=temp, greedy=False, top_k=20, uniforms=u, with_entropy=True)
        ref = (logits / temp).log_softmax(-1)
        assert torch.allclose(logp, ref.gather(-1, tok[:, None]).squeeze(-1), atol=1e-5)
        assert torch.allclose(ent, -(ref.exp() * ref).sum(-1), atol=1e-4)
        # top_k=20 restricts the support even though logp is of the full distribution
        top20 = logits.topk(20, dim=-1).indices
        assert all(t in row for t, row in zip(tok.tolist(), top20.tolist()))


def test_greedy_takes_argmax_and_still_reports_tempered_logprob():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tok, logp, _ = sample_tokens(logits, temperature=0.5, greedy=True)
    assert tok.item() == 1
    assert logp.item() == pytest.approx((logits / 0.5).log_softmax(-1)[0, 1].item(), abs=1e-6)


def test_extreme_logits_give_finite_logprobs_and_skip_underflowed_tokens():
    logits = torch.tensor([[0.0, -200.0]])  # p_1 = e^-200 underflows to 0 in fp32
    tok, logp, ent = sample_tokens(
        logits, temperature=0.5, greedy=False, uniforms=torch.tensor([0.99999994]), with_entropy=True
    )
    assert tok.item() == 0 and logp.item() == pytest.approx(0.0, abs=1e-6)
    assert ent.item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("temperature", dict(temperature=0.0)),
        ("top_p", dict(top_p=0.0)),
        ("top_k", dict(top_k=-1)),
        ("min_p", dict(min_p=1.0)),
        ("max_new_tokens", dict(max_new_tokens=0)),
    ],
)
def test_bad_sampling_values_name_the_field(field, kwargs):
    args = dict(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=field):
        validate_sampling(**args)
