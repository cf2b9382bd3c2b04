import torch

from covey.data.self_curation import SelfSampler, likely_rows
from tests.data._helpers import ids, items, one_step, reload, scored


def _batch(success, logp_rows, prompt_ids):
    b = scored(prompt_ids, success)
    b.behaviour_logprobs = torch.tensor(logp_rows, dtype=torch.float32)
    return b


def test_most_likely_row_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.4], [-0.1, -3.0], [-0.2, -0.2]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    inv, best = likely_rows(logp, mask, torch.tensor([0, 0, 1, 1]), "max_logprob")
    assert best.tolist() == [1, 2] and inv.tolist() == [0, 0, 1, 1]  # sums -3, -0.9 | -0.1, -0.4
    _, best = likely_rows(logp, mask, torch.tensor([0, 0, 1, 1]), "max_mean_logprob")
    assert best.tolist() == [1, 2]  # means -1.5, -0.45 | -0.1, -0.2
    _, best = likely_rows(torch.zeros(3, 2), torch.ones(3, 2), torch.tensor([4, 4, 4]), "max_logprob")
    assert best.tolist() == [0]  # ties: the first row


def test_prompts_the_mode_solves_never_enter_the_loss():
    s = SelfSampler(items(2))
    # prompt 100: its most likely row (row 1) is correct -> dropped; prompt 101: most likely row (2) wrong -> kept
    b = _batch([0, 1, 0, 1], [[-2.0] * 3, [-0.1] * 3, [-0.1] * 3, [-2.0] * 3], [100, 100, 101, 101])
    m = s.observe(b)
    assert b.completion_mask.sum(-1).tolist() == [0.0, 0.0, 3.0, 3.0]
    assert m["sampler/self/high_likelihood_frac"] == 0.5 and s.gated == {100: 0}


def test_gated_prompts_are_skipped_for_skip_epochs_then_rechecked():
    s = SelfSampler(items(3), seed=0, skip_epochs=1)
    s.next(3)  # epoch 0
    s.observe(_batch([1, 1], [[-0.1] * 3] * 2, [100, 100]))
    assert 100 not in ids(s.next(2)) and s.epoch == 1  # epoch 1: the two other prompts
    rest = ids(s.next(3))  # all of epoch 2: checked again
    assert 100 in rest and s.epoch == 2


def test_everything_gated_still_fills_the_batch():
    s = SelfSampler(items(2), seed=0, skip_epochs=5)
    s.next(2)
    s.observe(_batch([1, 1], [[-0.1] * 3] * 2, [100, 101]))
    out = s.next(5)
    assert len(out) == 5 and s.forced == 5
    b = _batch([1, 1], [[-0.1] * 3] * 2, [100, 101])
    s.observe(b)  # an all-solved batch: an empty loss, no crash
    assert float(b.completion_mask.sum()) == 0.0


def test_state_round_trip_is_exact():
    make = lambda: SelfSampler(items(5), seed=4)  # noqa: E731
    s = make()
    s.next(5)
    s.observe(_batch([1, 0], [[-0.1] * 3, [-1.0] * 3], [102, 102]))
    r = reload(s, make)
    assert s.next(9) == r.next(9) and s.gated == r.gated


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "self"})
    assert 0.0 <= m["sampler/self/high_likelihood_frac"] <= 1.0 and "learn/loss" in m
