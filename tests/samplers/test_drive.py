import math

import torch

from covey.samplers.drive import DriveSampler, hard_pool
from tests.samplers._helpers import ids, items, observe, one_step, reload, scored

NAN = math.nan


def test_hard_pool_by_hand():
    assert hard_pool(torch.tensor([0.9, 0.5, NAN, 0.75]), 0.75, 1) == [1, 2]  # unseen counts as hard
    assert hard_pool(torch.tensor([0.9, 0.8, 0.76]), 0.75, 2) == [1, 2]  # none below tau: the 2 hardest
    assert hard_pool(torch.tensor([1.0, 1.0]), 0.75, 5) == [0, 1]


def test_stage_one_is_uniform_then_the_pool_keeps_only_hard_prompts():
    s = DriveSampler(items(4), seed=0, stage1_steps=1, tau=0.75, stage2_group_size=16)
    first = s.next(4, 8)
    assert sorted(ids(first)) == [100, 101, 102, 103] and [d.n for d in first] == [8] * 4
    m = observe(s, scored([100] * 4 + [101] * 4 + [102] * 4 + [103] * 4,
                         [1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]))  # fmt: skip
    assert m["sampler/drive/stage"] == 1.0 and s.stage == 2
    hard = s.next(4, 8)  # pass rates 1, .75, .25, 0 -> pool {102, 103}, walked twice
    assert sorted(ids(hard)) == [102, 102, 103, 103] and [d.n for d in hard] == [16] * 4
    s.observe(scored([102] * 2 + [103] * 2, [1, 1, 0, 1]))  # 102 became easy (1.0), 103 at 0.5
    assert ids(s.next(2, 4)) == [103, 103]


def test_ema_smooths_the_pass_rate():
    s = DriveSampler(items(1), ema=0.5)
    s.observe(scored([100, 100], [1, 1]))
    s.observe(scored([100, 100], [0, 0]))
    assert s.rates.tolist() == [0.5]


def test_a_pool_of_easy_prompts_still_fills_the_batch():
    s = DriveSampler(items(3), seed=2, min_pool=1)
    s.observe(scored([100, 101, 102], [1, 1, 1]))
    assert len(s.next(5, 4)) == 5 and len(set(ids(s.next(5, 4)))) == 1  # the one "hardest" kept


def test_state_round_trip_is_exact():
    make = lambda: DriveSampler(items(6), seed=7, stage1_steps=1)  # noqa: E731
    s = make()
    s.next(3, 4)
    s.observe(scored([100, 100, 101, 101, 102, 102], [1, 1, 0, 1, 0, 0]))
    s.next(2, 4)
    r = reload(s, make)
    assert s.next(9, 4) == r.next(9, 4)
    assert torch.allclose(s.rates, r.rates, equal_nan=True)


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "drive", "stage2_group_size": 3})
    assert m["sampler/drive/stage"] == 2.0 and m["prompts/rollouts_per_prompt_max"] == 3.0
