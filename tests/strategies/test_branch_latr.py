"""`branch` and `latr`: tree invariants on the tiny model and one training step from config each
(LATR's rules: test_latr.py)."""

import pytest

from covey.engine import SamplingParams, TorchEngine
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.strategies.branch import BranchStrategy
from covey.train.config import validate_config
from covey.train.trainer import Trainer


def _ctx(G, max_new=12, **sp):
    model, tok = build_tiny("tiny-llama", seed=2)
    engine = TorchEngine(model, tok, dtype="fp32")
    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, G) for it in ITEMS],
                          sampling=lambda r: SamplingParams(seed=7, max_new_tokens=max_new, ignore_eos=True, **sp),
                          score=lambda b: {}, draw=lambda k: [], step=0)  # fmt: skip


ITEMS = [{"id": 5, "prompt": "3+4="}, {"id": 9, "prompt": "8-1="}]


def test_branch_tree_shares_prefixes_and_caps_width():
    batch, m = BranchStrategy(segment_tokens=3, branch_factor=2).rollout(ITEMS, _ctx(6))
    assert batch.group.tolist() == [0] * 6 + [1] * 6 and batch.prompt_id.tolist() == [5] * 6 + [9] * 6
    assert batch.segment_tokens == 3 and len(set(zip(batch.group.tolist(), batch.tree_path))) == 12
    ids = batch.completion_ids
    for a in range(12):
        for b in range(12):
            pa, pb = batch.tree_path[a], batch.tree_path[b]
            if batch.group[a] == batch.group[b] and pa[:2] == pb[:2]:
                assert ids[a, :6].tolist() == ids[b, :6].tolist()  # same depth-2 node: same first 2 segments
    assert m["tree/decoded_per_leaf"] == pytest.approx((2 + 4 + 6 + 6) * 3 / 6)  # 2, 4, 6, 6 paths x 3 tokens


@pytest.mark.parametrize("strategy,advantage", [({"name": "branch", "segment_tokens": 3}, "branch_grpo"),
                                                ({"name": "latr", "tau_abs": 0.001, "tau_rel": 1.0}, "grpo")])
def test_trains_one_step_from_config(tmp_path, strategy, advantage):
    cfg = validate_config({
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "strategy": strategy}, "sampling": {"max_new_tokens": 8},
        "algo": {"advantage": {"name": advantage}, "kl": None}, "reward_workers": 0,
        "log": {"progress": False, "tensorboard": False, "dir": str(tmp_path)}, "steps": 1,
    })  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    assert trainer.step()["time/step"] > 0
    trainer.close()


def test_branch_counts_and_warns_about_groups_with_fewer_leaves(caplog):
    # 3 tokens in all, segments of 3: the root splits once (2 paths), both end after one segment -> 2 of 6 leaves
    s = BranchStrategy(segment_tokens=3, branch_factor=2)
    with caplog.at_level("WARNING", logger="covey"):
        batch, m = s.rollout(ITEMS, _ctx(6, max_new=3))
        s.rollout(ITEMS, _ctx(6, max_new=3))
    assert len(batch) == 4 and m["tree/short_groups"] == 2 and m["tree/missing_leaves"] == 8
    assert sum("fewer leaves than the group size" in r.message for r in caplog.records) == 1  # warned once
    _, full = BranchStrategy(segment_tokens=3, branch_factor=2).rollout(ITEMS, _ctx(6))
    assert full["tree/short_groups"] == 0 and full["tree/missing_leaves"] == 0
