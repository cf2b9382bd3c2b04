"""`rorecomp_provisional` (RoRecomp, arXiv 2509.25958, reconstructed): which rows are priority rows, by hand;
the masked rows go to the replay buffer and come back as a compensation batch; the buffer is checkpointed."""

import pytest
import torch

import covey.strategies.rorecomp as rr
from covey.rollouts import Rollouts
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.strategies.rorecomp import priority_rows


def test_priority_rows_by_hand():
    # rows:     0    1    2    3    4    5
    correct = torch.tensor([1, 1, 1, 0, 0, 0], dtype=torch.bool)
    lengths = torch.tensor([9, 3, 5, 2, 8, 8])
    groups = torch.tensor([0, 0, 1, 1, 0, 1])
    # batch: correct by length 1 (3), 2 (5), 0 (9) -> ceil(1.5) = 2 -> 1, 2; incorrect longest 4, 5 (8, tie: row order), 3 -> 4, 5
    assert priority_rows(correct, lengths, groups, 0.5, "batch").tolist() == [False, True, True, False, True, True]
    # group 0: correct 1 (3) of {0, 1} -> 1; incorrect {4} -> 4. group 1: correct {2} -> 2; incorrect 5 (8) of {3, 5} -> 5
    assert priority_rows(correct, lengths, groups, 0.5, "group").tolist() == [False, True, True, False, True, True]
    assert priority_rows(correct, lengths, groups, 0.2, "group").tolist() == [False, True, True, False, True, True]
    assert priority_rows(correct, lengths, groups, 1.0, "batch").all()
    assert priority_rows(correct, lengths, groups, 0.1, "batch").tolist() == [False, True, False, False, True, False]


def _batch(lengths, rewards, groups):
    n, t = len(lengths), max(lengths)
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).float()
    return Rollouts(prompt_ids=[torch.tensor([1])] * n, completion_ids=torch.ones(n, t, dtype=torch.long), completion_mask=mask,
                    behaviour_logprobs=-mask, group=torch.tensor(groups), prompt_id=torch.tensor(groups),
                    rewards=torch.tensor(rewards)[:, None], reward_names=("accuracy",), reward_weights=torch.ones(1),
                    items=[{"id": g} for g in groups])  # fmt: skip


class Inner:
    def __init__(self):
        self.calls = 0

    def rollout(self, items, ctx):
        self.calls += 1
        return _batch([4, 2, 6, 3], [1.0, 1.0, 0.0, 0.0], [0, 0, 0, 0]), {}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _strategy(**params):
    s = STRATEGIES.build("rorecomp_provisional", {"compensation_every": 2, **params})
    s.inner = Inner()
    return s


CTX = RolloutContext(engine=None, tokenizer=None, draws=[type("D", (), {"n": 4})()], sampling=None, score=None, draw=None)


def test_priority_step_masks_the_rest_and_buffers_it_then_a_compensation_step_trains_on_it():
    s = _strategy()
    batch, m = s.rollout([{"id": 0}], CTX)
    # correct rows 0 (4), 1 (2) -> keep 1; incorrect 2 (6), 3 (3) -> keep 2
    assert batch.completion_mask.sum(-1).tolist() == [0.0, 2.0, 6.0, 0.0]
    assert batch.rewards[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]  # every reward stays: the advantage is the whole group's
    assert m["rorecomp/priority_frac"] == 0.5 and m["rorecomp/online_length_mean"] == 3.75 and m["rorecomp/buffer_rows"] == 2
    comp, m2 = s.rollout([{"id": 0}], CTX)  # step 2: compensation
    assert s.inner.calls == 1 and m2["rorecomp/compensation"] == 1.0
    assert comp.lengths.tolist() == [4, 3] and comp.rewards[:, 0].tolist() == [1.0, 0.0] and comp.group.tolist() == [0, 0]
    assert s.buffer is None
    batch3, _ = s.rollout([{"id": 0}], CTX)  # step 3: online again
    assert s.inner.calls == 2 and len(s.buffer) == 2


def test_buffer_is_fifo_and_survives_a_checkpoint():
    s = _strategy(compensation_every=0, buffer_rows=3)
    for _ in range(3):
        s.rollout([{"id": 0}], CTX)
    # each step buffers rows 0 and 3 as one group at offset 0, 4, 8; capacity 3: the three oldest rows left
    assert len(s.buffer) == 3 and s.buffer.group.tolist() == [4, 8, 8]
    t = _strategy(compensation_every=0, buffer_rows=3)
    t.load_state_dict(s.state_dict())
    assert t.steps == 3 and torch.equal(t.buffer.completion_ids, s.buffer.completion_ids) and t.offset == s.offset


def test_bad_parameters():
    with pytest.raises(ValueError, match="ratio"):
        STRATEGIES.build("rorecomp_provisional", {"ratio": 0.0})
    with pytest.raises(ValueError, match="cannot wrap itself"):
        STRATEGIES.build("rorecomp_provisional", {"inner": "rorecomp_provisional"})
    assert rr.RoRecomp.caps.carries_rollouts
