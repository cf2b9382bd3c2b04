"""Aggregation modes: the §2.2 test vector and micro-batch (parallelism) invariance of value and gradient."""

import pytest
import torch

from covey.algos import AGGREGATIONS, BatchTotals
from covey.algos.aggregation import batch_totals, masked_summary

# §2.2: Lm = [[1,2,3],[4,0,0]], mask = [[1,1,1],[1,0,0]]
LM = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
SPEC_2_2 = {
    "token-mean": 2.5,                       # 10 / 4 tokens
    "token-sum": 10.0,
    "seq-mean-token-sum": 5.0,               # (6 + 4) / 2
    "seq-mean-token-mean": 3.0,              # (6/3 + 4/1) / 2
    "seq-mean-token-sum-norm": 10.0 / 3.0,   # verl: 10 / S, S = 3
    "seq-mean-token-sum-constant": 10.0 / 6,  # oat / TRL dr_grpo: 10 / (C=3 * 2 seqs) = 1.6667
}


@pytest.mark.parametrize("name", sorted(SPEC_2_2))
def test_spec_vector(name):
    totals = batch_totals(MASK, max_new_tokens=3)
    assert AGGREGATIONS[name].fn(LM, MASK, totals)[0].item() == pytest.approx(SPEC_2_2[name], rel=1e-6)


def test_every_registered_mode_has_a_spec_vector():
    assert set(AGGREGATIONS) == set(SPEC_2_2)


def test_constant_normaliser_param_overrides_the_generation_budget():
    totals = batch_totals(MASK, max_new_tokens=3)
    assert AGGREGATIONS["seq-mean-token-sum-norm"].fn(LM, MASK, totals, normaliser=5.0)[0].item() == pytest.approx(2.0)
    assert AGGREGATIONS["seq-mean-token-sum-constant"].fn(LM, MASK, totals, normaliser=5.0)[0].item() == pytest.approx(1.0)


def test_empty_rows_are_excluded_from_sequence_denominators():
    lm = torch.cat([LM, torch.full((1, 3), 7.0)])  # third row fully masked
    mask = torch.cat([MASK, torch.zeros(1, 3)])
    totals = batch_totals(mask, max_new_tokens=3)
    assert totals.num_seqs == 2 and totals.num_tokens == 4
    for name in ("seq-mean-token-sum", "seq-mean-token-mean", "token-mean"):
        assert AGGREGATIONS[name].fn(lm, mask, totals)[0].item() == pytest.approx(SPEC_2_2[name])


def test_all_masked_batch_gives_zero_not_nan():
    mask = torch.zeros(2, 3)
    totals = batch_totals(mask, max_new_tokens=3)
    for name in AGGREGATIONS:
        assert AGGREGATIONS[name].fn(LM, mask, totals)[0].item() == 0.0


@pytest.mark.parametrize("name", sorted(SPEC_2_2))
def test_three_uneven_micro_batches_give_the_full_batch_gradient(name):
    torch.manual_seed(0)
    n, t = 7, 5
    x = torch.randn(n, t)
    mask = (torch.rand(n, t) > 0.3).float()
    mask[2] = 0  # an empty completion
    mask[4, 0] = 1.0
    weight = torch.randn(t, requires_grad=True)
    totals = batch_totals(mask, max_new_tokens=t)
    def fn(*args):
        value, metrics = AGGREGATIONS[name].fn(*args)
        assert metrics == {}  # the built-in reductions report nothing
        return value

    full = fn(x * weight, mask, totals)
    (g_full,) = torch.autograd.grad(full, weight)

    value = 0.0
    for rows in (slice(0, 1), slice(1, 5), slice(5, 7)):  # sizes 1, 4, 2
        part = fn(x[rows] * weight, mask[rows], totals)
        part.backward()  # gradient accumulation
        value += part.item()
    assert value == pytest.approx(full.item(), rel=1e-5, abs=1e-6)
    assert torch.allclose(weight.grad, g_full, rtol=1e-5, atol=1e-7)


def test_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match="mask shape"):
        AGGREGATIONS["token-mean"].fn(LM[:, :2], MASK, BatchTotals(4.0, 2.0, 3))


def test_batch_totals_counts_tokens_and_non_empty_rows():
    totals = batch_totals(torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]), max_new_tokens=8)
    assert totals == BatchTotals(num_tokens=3.0, num_seqs=2.0, max_new_tokens=8)
    with pytest.raises(ValueError, match="max_new_tokens"):
        batch_totals(MASK, max_new_tokens=0)


def test_masked_summary_uses_only_unmasked_values_and_is_empty_for_empty_mask():
    x = torch.tensor([[1.0, 5.0], [100.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    assert masked_summary(x, mask, "m") == {"m_mean": 1.0, "m_min": -3.0, "m_max": 5.0}
    assert masked_summary(x, torch.zeros_like(x), "m") == {}
