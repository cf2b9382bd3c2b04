import pytest
import torch

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
    m = one_step(tmp_path, rollout={"prompts_per_step": 2, "group_size": 4, "strategy": {"name": "dars", "n_max": 7, "filter": False}},
                 algo={"preset": "dr_grpo"})  # fmt: skip
    assert m["dars/hard_frac"] == 1.0 and m["dars/extra_rollouts"] == 6.0
    assert m["prompts/rollouts_per_prompt_mean"] == 7.0


def test_filter_that_drops_everything_skips_the_step_by_default(tmp_path):
    # the code: "No valid samples left after filtering. Skipping this batch." -> no update this step
    m = one_step(tmp_path, rollout={"prompts_per_step": 2, "group_size": 2, "strategy": {"name": "dars", "n_max": 3}})
    assert m["dars/filtered_frac"] == 1.0 and m["dars/skipped"] == 1.0 and m["train/skipped_step"] == 1.0
    assert "learn/loss" not in m


def test_on_empty_keep_is_covey_s_variant(tmp_path):
    m = one_step(tmp_path, rollout={"prompts_per_step": 2, "group_size": 2,
                                    "strategy": {"name": "dars", "n_max": 3, "on_empty": "keep"}})  # fmt: skip
    assert m["dars/filtered_frac"] == 1.0 and m["dars/skipped"] == 0.0 and m["prompts/unique"] == 2.0


def _scripted(plan):
    """A ctx.score that writes `accuracy` from plan[call][prompt id][k] for the k-th row of each prompt."""
    calls = [0]

    def score(b):
        counters, vals = {}, []
        for pid in b.prompt_id.tolist():
            k = counters.get(pid, 0)
            counters[pid] = k + 1
            vals.append(plan[calls[0]][pid][k])
        calls[0] += 1
        b.rewards, b.reward_names = torch.tensor(vals, dtype=torch.float32)[:, None], ("accuracy",)
        return {}

    return score


def _ctx(score, G=4):
    from covey.engine import SamplingParams, TorchEngine
    from covey.models import build_tiny
    from covey.samplers import Draw
    from covey.strategies.base import RolloutContext

    model, tok = build_tiny("tiny-llama", seed=2)
    return RolloutContext(engine=TorchEngine(model, tok, dtype="fp32"), tokenizer=tok, draws=[Draw(it, G) for it in ITEMS],
                          sampling=lambda r: SamplingParams(seed=7 + r, max_new_tokens=3), score=score,
                          draw=lambda k: [])  # fmt: skip


ITEMS = [{"id": 1, "prompt": "a"}, {"id": 2, "prompt": "b"}, {"id": 3, "prompt": "c"}]


@pytest.mark.parametrize("b_second,kept,saved", [([0, 0, 0, 0], [1], 0.0), ([0, 1, 0, 0], [1, 2], 1 / 3)])
def test_filter_keeps_prompts_with_0_lt_acc_lt_1(b_second, kept, saved):
    # N = 4, n_max 8. A: acc 1/4 -> S = 0.375, dN = ceil((2 - 1.5) / 0.375) = 2. B: acc 0 -> 1/8 ->
    # S = 0.21875, dN = ceil((2 - 0.875) / 0.21875) = 6, capped at 8 - 4 = 4. C: acc 1 -> 0.
    plan = [{1: [1, 0, 0, 0], 2: [0, 0, 0, 0], 3: [1, 1, 1, 1]}, {1: [0, 0], 2: b_second}]
    batch, m = STRATEGIES.build("dars", {"n_max": 8}).rollout(ITEMS, _ctx(_scripted(plan)))
    assert m["dars/extra_rollouts"] == 6.0 and m["dars/hard_frac"] == 2 / 3
    # combined: A 1/6 (kept), B 0 or 1/8, C 1 (dropped: acc < upper fails)
    assert sorted(set(batch.prompt_id.tolist())) == kept and m["dars/filtered_frac"] == pytest.approx(1 - len(kept) / 3)
    assert batch.prompt_id.tolist().count(1) == 6 and m["dars/second_saved"] == pytest.approx(saved)
    assert m["dars/skipped"] == 0.0


def test_upper_threshold_and_filter_off():
    plan = [{1: [1, 1, 1, 0], 2: [0, 0, 0, 0], 3: [1, 0, 0, 0]}, {2: [0, 0, 0, 0], 3: [1, 0]}]
    batch, m = STRATEGIES.build("dars", {"n_max": 8, "upper": 0.5}).rollout(ITEMS, _ctx(_scripted(plan)))
    assert sorted(set(batch.prompt_id.tolist())) == [3]  # A 3/4 >= 0.5 dropped; B 0 dropped; C 2/6 kept
    batch, m = STRATEGIES.build("dars", {"n_max": 8, "filter": False}).rollout(ITEMS, _ctx(_scripted(plan)))
    assert sorted(set(batch.prompt_id.tolist())) == [1, 2, 3] and len(batch) == 4 + 8 + 6
