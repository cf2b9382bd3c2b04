import pytest

from covey.strategies.dars import dars_extra
from covey.strategies import STRATEGIES
from tests.samplers._helpers import one_step


@pytest.mark.parametrize("schedule,n_max,want", [("et", 32, [24, 11, 3, 1, 0, 0]), ("hw", 64, [56, 24, 8, 3, 0, 0])])
def test_schedule_table_from_the_code(schedule, n_max, want):
    accs = [0, 1 / 8, 2 / 8, 3 / 8, 4 / 8, 7 / 8]
    assert [dars_extra(a, 8, n_max, schedule) for a in accs] == want


def test_std_schedule_and_cap():
    # use_std: S = 2 sqrt(acc(1-acc)), peak = N. acc=1/8: S = 0.6614, dN = ceil((8 - 5.29)/0.6614) = 5
    assert dars_extra(1 / 8, 8, 32, "et", use_std=True) == 5
    assert dars_extra(0.0, 8, 10, "et") == 2  # capped at n_max - N


def test_bad_schedule_is_named():
    with pytest.raises(ValueError, match="schedule"):
        STRATEGIES.build("dars", {"schedule": "xx"})


def test_one_training_step_gives_hard_prompts_more_rollouts(tmp_path):
    # the random tiny model never answers: every prompt is hard (acc 0 -> 1/8 -> dN 6, capped at 7 - 4)
    m = one_step(tmp_path, rollout={"prompts_per_step": 2, "group_size": 4, "strategy": {"name": "dars", "n_max": 7}},
                 algo={"preset": "dr_grpo"})  # fmt: skip
    assert m["dars/hard_frac"] == 1.0 and m["dars/extra_rollouts"] == 6.0
    assert m["prompts/rollouts_per_prompt_mean"] == 7.0


def test_filter_that_drops_everything_keeps_the_batch(tmp_path):
    m = one_step(tmp_path, rollout={"prompts_per_step": 2, "group_size": 2, "strategy": {"name": "dars", "n_max": 3, "filter": True}})
    assert m["dars/filtered_frac"] == 1.0 and m["prompts/unique"] == 2.0
