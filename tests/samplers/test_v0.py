"""`v0_provisional` (V_0, arXiv 2602.03584, reconstructed): features, the in-context prediction by hand, the
draw of the most informative candidates, the prediction error metric and the checkpointed history."""

import math

import pytest
import torch

from covey.rollouts import Rollouts
from covey.samplers import SAMPLERS
from covey.samplers.v0 import prompt_features, v0_predict


def test_features_are_unit_vectors_of_shared_wording():
    f = prompt_features(["What is 2 + 3?", "What is 2 + 3?", "What is 7 * 8?", "zebra crossing lights", "ab"], dim=64)
    assert torch.allclose(f[:4].norm(dim=-1), torch.ones(4, dtype=torch.float64)) and f[4].abs().sum() == 0
    assert float(f[0] @ f[1]) == pytest.approx(1.0)
    assert float(f[0] @ f[2]) > float(f[0] @ f[3])  # same template beats unrelated text
    chat = prompt_features([[{"role": "user", "content": "What is 2 + 3?"}]], dim=64)
    assert torch.allclose(chat[0], f[0])


def test_prediction_by_hand():
    e1, e2 = torch.eye(2, dtype=torch.float64)
    hist = torch.stack([e1, e2])
    # m = 3 / 8; w = [1, exp(-1 / 0.5)]; p = (0.375 + 3) / (1 + 4 + 4 e^-2)
    p = v0_predict(e1[None], hist, torch.tensor([3.0, 0.0], dtype=torch.float64), torch.tensor([4.0, 4.0], dtype=torch.float64),
                   a0=1.0, tau=0.5)  # fmt: skip
    assert float(p) == pytest.approx(3.375 / (5 + 4 * math.exp(-2)))
    assert v0_predict(e1[None], hist[:0], torch.zeros(0), torch.zeros(0), a0=1.0, tau=0.5).tolist() == [0.5]


ITEMS = [{"id": i, "prompt": p} for i, p in enumerate(["What is 1 + 1?", "What is 9 * 9?", "Name a colour.", "What is 1 + 2?"])]


def _scored(ids, correct):
    n = len(ids)
    return Rollouts(prompt_ids=[torch.tensor([1])] * n, completion_ids=torch.ones(n, 1, dtype=torch.long),
                    completion_mask=torch.ones(n, 1), behaviour_logprobs=torch.zeros(n, 1), group=torch.tensor(ids),
                    prompt_id=torch.tensor(ids), rewards=torch.tensor(correct, dtype=torch.float32)[:, None],
                    reward_names=("accuracy",), reward_weights=torch.ones(1))  # fmt: skip


def test_draws_the_most_uncertain_candidates_and_learns_from_outcomes():
    s = SAMPLERS.build("v0_provisional", {"pool": 4, "tau": 0.05}, ITEMS, 0)
    first = s.next(4, 2)  # empty history: every candidate predicts 1/2, the uniform order is kept
    assert sorted(d.item["id"] for d in first) == [0, 1, 2, 3] and all(d.n == 2 for d in first)
    # item 0 solved twice, item 2 failed twice, items 1 and 3 split: their predictions move accordingly
    fb = s.observe(_scored([0, 0, 1, 1, 2, 2, 3, 3], [1, 1, 1, 0, 0, 0, 0, 1]))
    assert fb.metrics["sampler/v0_provisional/pred_mae"] == pytest.approx((0.5 + 0 + 0.5 + 0) / 4)
    p = s.predict(torch.arange(4))
    assert p[0] > 0.5 > p[2] and abs(float(p[1]) - 0.5) < abs(float(p[0]) - 0.5)
    picks = s.next(2, 2)  # the next 8 candidates (two epochs of the 4 items): the two split items win
    assert sorted(d.item["id"] for d in picks) == [1, 3]
    t = SAMPLERS.build("v0_provisional", {"pool": 4, "tau": 0.05}, ITEMS, 0)
    t.load_state_dict(s.state_dict())
    assert torch.equal(t.predict(torch.arange(4)), s.predict(torch.arange(4))) and t.predicted == s.predicted


def test_window_keeps_the_latest_observations():
    s = SAMPLERS.build("v0_provisional", {"window": 3}, ITEMS, 0)
    s.next(4, 1)
    s.observe(_scored([0, 1, 2, 3], [1, 0, 1, 0]))
    assert s.hist_pos.tolist() == [1, 2, 3]


def test_bad_parameters():
    with pytest.raises(Exception, match="pool"):
        SAMPLERS.check_params("v0_provisional", {"pool": 0})
