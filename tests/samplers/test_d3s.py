import itertools
import math

import pytest
import torch

from covey.samplers.d3s import D3SSampler, annealed, max_variance_subset, top_tokens
from tests.samplers._helpers import items, observe, one_step, reload, scored


def _var(x):
    return float(((x - x.mean()) ** 2).mean())


def test_max_variance_subset_equals_brute_force():
    g = torch.Generator().manual_seed(0)
    for n in range(1, 10):
        a = torch.randn(n, generator=g).double()
        for k in range(1, n + 1):
            best = max(_var(a[list(c)]) for c in itertools.combinations(range(n), k))
            assert _var(a[max_variance_subset(a, k)]) == pytest.approx(best, abs=1e-12)


def test_max_variance_subset_by_hand():
    assert max_variance_subset(torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]), 2).tolist() == [0, 4]
    assert max_variance_subset(torch.tensor([5.0, 0.0, 0.1, 0.2]), 2).tolist() == [0, 1]


def test_token_keep_counts_are_ceil_rho_l():
    score = torch.tensor([[0.1, 0.9, 0.5, 0.3, 0.0], [2.0, 1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    keep = top_tokens(score, mask, 0.5, "sequence")  # ceil(0.5*4) = 2 and ceil(0.5*2) = 1
    assert keep.tolist() == [[False, True, True, False, False], [True, False, False, False, False]]
    keep = top_tokens(score, mask, 0.5, "batch")  # ceil(0.5*6) = 3 over the batch: 2.0, 1.0, 0.9
    assert keep.tolist() == [[False, True, False, False, False], [True, True, False, False, False]]


def test_schedule_by_hand():
    assert annealed(0.5, 1.0, 50, 100, "linear") == pytest.approx(0.75)
    assert annealed(0.5, 1.0, 25, 100, "cosine") == pytest.approx(0.5 + 0.5 * (1 - math.cos(math.pi / 4)) / 2)
    assert annealed(0.2, 1.0, 500, 100, "linear") == 1.0 and annealed(0.2, 1.0, 0, 0, "linear") == 1.0


def _batch():
    # group 0 rewards [1,0,0,0] -> A = [1.5, -.5, -.5, -.5]; group 1 [1,1,0,0] -> A = [.866, .866, -.866, -.866]
    b = scored([100] * 4 + [101] * 4, [1, 0, 0, 0, 1, 1, 0, 0])
    b.entropies = torch.tensor([[1.0, 3.0, 2.0]] * 8)
    return b


def test_observe_keeps_the_max_variance_rows_and_high_score_tokens():
    s = D3SSampler(items(2), sample_keep_start=0.5, token_keep_start=0.34, anneal_steps=10)
    b = _batch()
    m = observe(s, b)
    # size-4 subsets of the sorted A's: {1.5, .866} + {-.866, -.866} has variance 1.0998 (best, by hand),
    # ahead of {1.5} + three smallest (0.9665) and {1.5, .866, .866, -.866} (0.775): rows 0, 5, 6, 7
    rows = (b.completion_mask.sum(-1) > 0).nonzero().flatten().tolist()
    assert rows == [0, 5, 6, 7]
    # ceil(0.34 * 3) = 2 tokens per kept row: entropies 3.0 and 2.0 (|A| is constant along a row)
    assert b.completion_mask[0].tolist() == [0.0, 1.0, 1.0]
    assert m["sampler/d3s/rows_kept_frac"] == 0.5 and m["sampler/d3s/tokens_kept_frac"] == pytest.approx(8 / 24)
    assert s.t == 1 and s.ratios()[0] == pytest.approx(0.55)


def test_intra_group_scope_keeps_rows_in_every_group():
    s = D3SSampler(items(2), sample_keep_start=0.5, token_keep_start=1.0, scope="group", anneal_steps=10)
    b = _batch()
    observe(s, b)
    # 2 of 4 per group: the largest + the smallest A (ties in a stable ascending sort: first of the
    # smallest, last of the largest): group 0 rows 0 and 1, group 1 rows 5 and 6
    assert (b.completion_mask.sum(-1) > 0).nonzero().flatten().tolist() == [0, 1, 5, 6]


def test_missing_entropies_is_a_clear_error():
    with pytest.raises(ValueError, match="needs rollouts.entropies"):
        D3SSampler(items(2)).observe(scored([100, 100], [1, 0]))


def test_state_round_trip_is_exact():
    make = lambda: D3SSampler(items(5), seed=2)  # noqa: E731
    s = make()
    s.next(3, 4)
    s.observe(_batch())
    r = reload(s, make)
    assert s.next(7, 4) == r.next(7, 4) and s.ratios() == r.ratios()


def test_one_training_step_asks_for_entropies(tmp_path):
    m = one_step(tmp_path, {"name": "d3s", "sample_keep_start": 0.5, "token_keep_start": 0.5})
    assert m["sampler/d3s/rows_kept_frac"] == 0.5 and 0 < m["sampler/d3s/tokens_kept_frac"] <= 0.5
