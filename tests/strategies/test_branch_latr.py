"""`branch` and `latr`: tree invariants on the tiny model, LATR's branch test, pruning and capacity,
and one training step from config each."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.strategies.branch import BranchStrategy
from covey.strategies.latr import LATR, branch_candidates, edit_distance
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
    assert batch.extras["segment_tokens"] == 3 and len(set(zip(batch.group.tolist(), batch.tree_path))) == 12
    ids = batch.completion_ids
    for a in range(12):
        for b in range(12):
            pa, pb = batch.tree_path[a], batch.tree_path[b]
            if batch.group[a] == batch.group[b] and pa[:2] == pb[:2]:
                assert ids[a, :6].tolist() == ids[b, :6].tolist()  # same depth-2 node: same first 2 segments
    assert m["tree/decoded_per_leaf"] == pytest.approx((2 + 4 + 6 + 6) * 3 / 6)  # 2, 4, 6, 6 paths x 3 tokens


def test_latr_branch_rule_and_edit_distance():
    probs = torch.tensor([[0.40, 0.35, 0.25], [0.9, 0.05, 0.05], [0.5, 0.2, 0.3]])
    c1, c2, want = branch_candidates(probs, tau_abs=0.25, tau_rel=0.15)
    assert c1.tolist() == [0, 0, 0] and c2.tolist() == [1, 1, 2] and want.tolist() == [True, False, False]
    assert edit_distance([1, 2, 3], [1, 2, 3]) == 0 and edit_distance([1, 2, 3], [3, 2, 1]) == 2
    assert edit_distance([], [4, 5]) == 2


def test_latr_prunes_children_that_stay_like_their_parent():
    from covey.engine.tree import Row

    strat = LATR(filter_steps=(2,), tau_ed=0.4)
    dec = type("D", (), {"stop_t": torch.tensor([99])})()
    parent = Row([1], tokens=[1, 2, 3, 4], payload=(0, (1,), 0, -1, 0))
    alike = Row([1], tokens=[1, 9, 3, 4], payload=(0, (2,), 1, 0, 2))  # born at step 2, same last 2 tokens
    other = Row([1], tokens=[1, 9, 5, 6], payload=(0, (3,), 2, 0, 2))
    stopped = Row([1], tokens=[1, 9, 3, 99], payload=(0, (4,), 3, 0, 2))
    by_uid = {0: parent}
    assert strat._too_close(alike, by_uid, 4, dec) and not strat._too_close(other, by_uid, 4, dec)
    assert not strat._too_close(alike, by_uid, 3, dec)  # only r in filter_steps steps after birth
    assert not strat._too_close(stopped, by_uid, 4, dec)  # a stop token in either window: skipped


def test_latr_branches_within_capacity():
    strat = LATR(tau_abs=1e-4, tau_rel=1.0, tau_ed=0.0, filter_steps=(2,), force_return_step=8)
    batch, m = strat.rollout(ITEMS, _ctx(4))  # a flat random model: every step passes the branch test
    assert batch.num_groups == 2 and len(batch) == 8
    assert m["latr/pruned"] == 0 and m["latr/branches"] == 2 * 3  # capacity: 4 branches per root
    assert m["latr/distinct_ratio"] == 1.0
    paths = list(zip(batch.group.tolist(), batch.tree_path))
    assert len(set(paths)) == 8


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


def test_latr_mix_ratio_samples_the_rest_of_each_group():
    from covey.learner.logprobs import completion_logprobs

    ctx = _ctx(4)
    strat = LATR(tau_abs=1e-4, tau_rel=1.0, tau_ed=0.0, filter_steps=(2,), force_return_step=8, mix_ratio=0.5)
    batch, m = strat.rollout(ITEMS, ctx)  # per root: round(0.5 * 4) = 2 LATR branches + 2 samples
    assert batch.group.tolist() == [0] * 4 + [1] * 4 and batch.prompt_id.tolist() == [5] * 4 + [9] * 4
    assert m["latr/branches"] == 2  # capacity 2 per root: one split each
    first = [p[0] for p in batch.tree_path]
    assert first == [0, 0, first[2], first[3], 0, 0, first[6], first[7]] and 0 not in first[2:4] + first[6:8]
    assert len(set(zip(batch.group.tolist(), batch.tree_path))) == 8
    # every row's behaviour log-probs are the policy's (sampled rows included: they are ordinary samples)
    lp, _ = completion_logprobs(ctx.engine.model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.0)
    assert torch.allclose(lp * batch.completion_mask, batch.behaviour_logprobs, atol=1e-4)
    with pytest.raises(ValueError, match="mix_ratio"):
        LATR(mix_ratio=0.0)

