import torch

from covey.data.masa import MasaSampler, cutoff_rows
from tests.data._helpers import ids, items, one_step, reload, scored


def test_zero_variance_groups_are_filtered_and_their_prompts_gated():
    s = MasaSampler(items(3), seed=0)
    s.next(3)
    b = scored([100] * 2 + [101] * 2 + [102] * 2, [0, 0, 1, 0, 1, 1])
    m = s.observe(b)
    assert b.completion_mask.sum(-1).tolist() == [0, 0, 3, 3, 0, 0]
    assert m["sampler/masa/filtered_rows_frac"] == 4 / 6 and set(s.gated) == {100, 102}
    assert ids(s.next(1)) == [101]  # epoch 1 skips the gated prompts


def test_gate_after_needs_visits_in_a_row():
    s = MasaSampler(items(2), gate_after=2, filter_zero_variance=False)
    s.observe(scored([100, 100], [0, 0]))
    assert s.gated == {}
    s.observe(scored([100, 100], [0, 1]))  # signal resets the streak
    s.observe(scored([100, 100], [0, 0]))
    assert s.gated == {}
    s.observe(scored([100, 100], [1, 1]))
    assert set(s.gated) == {100}


def test_cutoff_by_hand():
    assert cutoff_rows(torch.tensor([4, 9]), torch.tensor([3.0, float("nan")]), 1.5).tolist() == [5, -1]
    s = MasaSampler(items(1), cutoff_margin=1.0, filter_zero_variance=False)
    first = scored([100] * 3, [1, 1, 0])
    first.completion_mask = torch.tensor([[1.0, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    first.completion_ids = torch.ones(3, 5, dtype=torch.long)
    first.behaviour_logprobs = torch.zeros(3, 5)
    s.observe(first)
    assert s.pred_len == {100: 3.0}  # mean length of the correct rows (2 and 4)
    second = scored([100] * 2, [1, 1])
    second.completion_mask = torch.tensor([[1.0, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    second.completion_ids, second.behaviour_logprobs = torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 5)
    m = s.observe(second)  # row 1 (5 tokens) runs past ceil(1.0 * 3) = 3: reward 0, tokens 4-5 masked
    assert second.rewards[:, 0].tolist() == [1.0, 0.0] and second.completion_mask[1].tolist() == [1, 1, 1, 0, 0]
    assert m["sampler/masa/cutoff_rows"] == 1.0


def test_everything_gated_still_fills_the_batch():
    s = MasaSampler(items(2), seed=1, skip_epochs=3)
    s.next(2)
    s.observe(scored([100, 100, 101, 101], [0, 0, 1, 1]))
    # both gated through epoch 3: one whole pass (epoch 1) is skipped, then gated prompts are drawn anyway
    assert len(s.next(6)) == 6 and (s.skipped, s.forced) == (2, 4)


def test_state_round_trip_is_exact():
    make = lambda: MasaSampler(items(6), seed=5, cutoff_margin=2.0)  # noqa: E731
    s = make()
    s.next(4)
    s.observe(scored([100, 100, 103, 103], [0, 0, 1, 0]))
    r = reload(s, make)
    assert s.next(11) == r.next(11) and (s.gated, s.streak, s.pred_len) == (r.gated, r.streak, r.pred_len)


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "masa", "cutoff_margin": 1.5})
    assert "sampler/masa/filtered_rows_frac" in m and "learn/loss" in m
