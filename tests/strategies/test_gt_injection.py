"""`gt_injection` (TempSamp-R1's mixed-policy rollout): one gold row per group, in the right slot, with
EOS, tail-truncated, recomputed pi_old, and the gold reaching the reward and the learner."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import load
from covey.rewards.temporal import TemporalIoU
from covey.samplers.base import Draw
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.train.config import ConfigError, load_config

ITEMS = [{"id": 0, "prompt": "When? ", "answer": "<answer> 2.0 to 6.0 </answer>"},
         {"id": 1, "prompt": "When again? ", "answer": None}, {"id": 2, "prompt": "Once more ", "answer": "1 - 3"}]  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-llama")


def _ctx(tiny, max_new=40):
    model, tok = tiny
    engine = TorchEngine(model, tok, dtype="fp32")
    sp = lambda r: SamplingParams(max_new_tokens=max_new, seed=3 + r)  # noqa: E731
    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, 3) for it in ITEMS], sampling=sp,
                          score=lambda b: {}, draw=lambda k: [], step=4, policy_version=4)  # fmt: skip


def test_the_last_row_of_each_group_becomes_the_gold_completion(tiny):
    _, tok = tiny
    strategy = STRATEGIES.build("gt_injection", {"builder": "covey.rewards.temporal:gt_response"})
    batch, metrics = strategy.rollout(ITEMS, _ctx(tiny))
    assert metrics["rollout/gt_injected_groups"] == 2.0  # item 1 has no gold span: its group stays sampled
    gold = "<answer> 2.00 to 6.00 </answer>"
    row = batch.completion_ids[2, : int(batch.lengths[2])].tolist()
    assert tok.decode(row[:-1]) == gold and row[-1] == tok.eos_token_id and batch.finish_reason[2] == "stop"
    assert tok.decode(batch.completion_ids[8, : int(batch.lengths[8]) - 1].tolist()) == "<answer> 1.00 to 3.00 </answer>"
    assert batch.behaviour_logprobs[2].abs().sum() == 0 and batch.policy_version[2, : len(row)].eq(4).all()
    assert batch.recompute_old_logprobs and bool((batch.behaviour_logprobs[[0, 1, 3, 4, 5]] != 0).any())
    reward = TemporalIoU()(None, [tok.decode(batch.completion_ids[i, : int(batch.lengths[i])], skip_special_tokens=True)
                                  for i in (2, 8)], answer=[ITEMS[0]["answer"], ITEMS[2]["answer"]])  # fmt: skip
    assert reward == pytest.approx([1.1, 1.1])  # the gold scores full IoU and the format bonus


def test_a_long_gold_keeps_its_tail_and_the_slot_is_configurable(tiny):
    _, tok = tiny
    strategy = STRATEGIES.build("gt_injection", {"replace_index": 0})
    batch, _ = strategy.rollout(ITEMS, _ctx(tiny, max_new=8))
    kept = batch.completion_ids[0, :8].tolist()
    assert kept == (tok.encode(ITEMS[0]["answer"], add_special_tokens=False) + [tok.eos_token_id])[-8:]
    assert batch.completion_mask[0].sum() == 8 and batch.finish_reason[0] == "stop"


def test_refusals():
    with pytest.raises(ValueError, match="cannot wrap itself"):
        STRATEGIES.build("gt_injection", {"inner": "gt_injection"})
    with pytest.raises(ConfigError, match="cannot use algo.correction"):
        load_config(None, ["rollout.strategy={name: gt_injection}", "algo.correction={name: tis}"])
