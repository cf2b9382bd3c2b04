import math

import pytest
import torch

from covey.samplers.gdro import GDROSampler, difficulty_bins, ema_debiased, mirror_step, sqrt_allocation
from tests.samplers._helpers import ids, items, one_step, reload, scored


def test_bins_by_hand():
    r = torch.tensor([0.0, 0.24, 0.25, 0.99, 1.0, math.nan])
    assert difficulty_bins(r, 4).tolist() == [0, 0, 1, 3, 3, 4]


def test_ema_debiasing_and_mirror_step_by_hand():
    m, c = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.long)
    seen = torch.tensor([True, True, False])
    m, c, lhat = ema_debiased(m, c, torch.tensor([1.0, 0.5, 9.0], dtype=torch.float64), seen, 0.9)
    assert m.tolist() == pytest.approx([0.1, 0.05, 0.0]) and lhat.tolist() == pytest.approx([1.0, 0.5, 0.0])
    m, c, lhat = ema_debiased(m, c, torch.tensor([0.0, 0.5, 0.0], dtype=torch.float64), seen, 0.9)
    assert lhat.tolist() == pytest.approx([0.09 / 0.19, 0.5, 0.0])  # (0.9*0.1) / (1 - 0.81)
    logq = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))
    q = mirror_step(logq, torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([True, True]), math.log(2)).exp()
    assert q.tolist() == pytest.approx([2 / 3, 1 / 3])  # q * exp(eta L), renormalised


def test_sqrt_allocation_by_hand():
    assert sqrt_allocation([0.5, 0.5, 0.0, 0.0], 16, 2, 16)[0] == [6, 6, 2, 2]
    sizes, lam = sqrt_allocation([0.5, 0.25], 12, 2, 12)
    assert sizes == [8, 4] and lam == pytest.approx(16.0)  # 16 * (0.5 + 0.25) = 12
    assert sqrt_allocation([0.0, 0.0, 0.0], 12, 2, 8)[0] == [4, 4, 4]
    assert sum(sqrt_allocation([0.3, 0.1, 0.2], 10, 1, 6)[0]) == 10
    with pytest.raises(ValueError, match="cannot share"):
        sqrt_allocation([0.5], 10, 2, 4)


def test_weight_moves_to_the_hard_bin():
    s = GDROSampler(items(4), seed=0, bins=2, eta=1.0, gamma=0.0)
    s.next(4, 4)
    s.observe(scored([100] * 2 + [101] * 2 + [102] * 2 + [103] * 2, [0, 0, 0, 0, 1, 1, 1, 0]))
    # first update: all drawn from the unseen bin -> only it moves; the rates put 100, 101 in bin 0
    assert s.rates.tolist() == [0.0, 0.0, 1.0, 0.5]
    p = s.probabilities()
    assert p[0] > 0 and p[1] > 0 and p[2] == 0  # bins 0 and 1 are non-empty, unseen is empty now
    s.observe(scored([100] * 2 + [102] * 2, [0, 0, 1, 1]))  # bin 0 loss 1, bin 1 loss 0
    q = s.logq.exp()
    assert q[0] > q[1]
    counts = torch.zeros(2)
    for _ in range(30):
        for i in ids(s.next(2, 4)):
            counts[int(s.rates[i - 100] >= 0.5)] += 1
    assert counts[0] > counts[1]


def test_sqrt_rollouts_favour_uncertain_bins():
    s = GDROSampler(items(3), rollouts="sqrt", bins=2)
    s.observe(scored([100] * 2 + [101] * 2, [1, 0, 1, 1]))  # 100 -> bin 1 at 0.5, 101 -> bin 1 at 1.0, 102 unseen
    sizes = s.allocate([{"id": 100}, {"id": 101}, {"id": 102}], 4)
    assert sum(sizes) == 12 and sizes[2] >= sizes[0] >= sizes[1] >= 2


def test_more_prompts_than_items_still_fills():
    s = GDROSampler(items(2), seed=1)
    assert len(s.next(7, 4)) == 7


def test_state_round_trip_is_exact():
    make = lambda: GDROSampler(items(6), seed=8, rollouts="sqrt")  # noqa: E731
    s = make()
    s.next(3, 4)
    s.observe(scored([100, 100, 101, 101], [1, 0, 0, 0]))
    r = reload(s, make)
    a, b = s.next(5, 4), r.next(5, 4)
    assert a == b and [d.n for d in a] == s.allocate([d.item for d in a], 4) and sum(d.n for d in a) == 20


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "gdro", "rollouts": "sqrt"}, rollout={"prompts_per_step": 4, "group_size": 3})
    assert "sampler/gdro/q_unseen" in m and "sampler/gdro/shadow_price" in m
