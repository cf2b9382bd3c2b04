"""`arrol`: the balancing prune rule, the head learns a separable problem, the strategy keeps G rows
per group from an over-provisioned pool, its head survives state_dict, and it trains from config."""

import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import build_tiny
from covey.strategies.arrol import ARRoL, balanced_keep, train_head
from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.train.config import validate_config
from covey.train.trainer import Trainer


def test_balanced_keep_steers_towards_mixed_groups():
    assert balanced_keep([0.9, 0.8, 0.7, 0.1], 2) == [2, 3]  # mean >= .5: drop the likeliest successes
    assert balanced_keep([0.1, 0.2, 0.3, 0.9], 2) == [2, 3]  # mean < .5: drop the likeliest failures
    assert balanced_keep([0.5, 0.5], 2) == [0, 1]


def test_head_learns_a_separable_problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] > 0).float()
    w, b, loss = train_head(torch.zeros(8), torch.zeros(()), x, y, lr=0.5, steps=200)
    assert loss < 0.4 and float(((x @ w + b > 0).float() == y).float().mean()) > 0.9


def test_arrol_prunes_to_group_size_and_keeps_its_head():
    model, tok = build_tiny("tiny-llama", seed=6)
    engine = TorchEngine(model, tok, dtype="fp32")

    def score(batch):
        ids = batch.completion_ids[:, 0]
        batch.rewards, batch.reward_names = (ids % 2 == 0).float()[:, None], ("even_first",)
        return {}

    items = [{"id": 1, "prompt": "1+1="}, {"id": 2, "prompt": "2+5="}]
    ctx = RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, 3) for it in items],
                         sampling=lambda r: SamplingParams(seed=1, max_new_tokens=6, ignore_eos=True),
                         score=score, draw=lambda k: [], step=0)  # fmt: skip
    strat = ARRoL(oversample=2.0, check_tokens=2, warmup_rows=0)
    batch, m = strat.rollout(items, ctx)
    assert len(batch) == 6 and batch.group.tolist() == [0, 0, 0, 1, 1, 1] and m["arrol/pruned_rows"] == 6
    assert batch.rewards is not None and strat.seen == 6 and strat.w.abs().sum() > 0
    again = ARRoL()
    again.load_state_dict(strat.state_dict())
    assert torch.equal(again.w, strat.w) and again.seen == 6


def test_arrol_trains_one_step_from_config(tmp_path):
    cfg = validate_config({
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "strategy": {"name": "arrol", "check_tokens": 2}},
        "sampling": {"max_new_tokens": 6}, "algo": {"kl": None}, "reward_workers": 0,
        "log": {"progress": False, "tensorboard": False, "dir": str(tmp_path)}, "steps": 1,
    })  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    m = trainer.step()
    assert m["arrol/pruned_rows"] == 8 and m["time/step"] > 0
    trainer.close()
