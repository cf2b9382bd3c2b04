"""`april`: exactly B groups per step, carried completions resumed first with their per-token policy
versions, IS corrections weight exactly the stale tokens, one training step from config, and an
exact resume of the carried buffer after kill -9."""


import pytest
import torch

from covey.algos.corrections import tis
from covey.algos.registry import CorrectionInputs
from covey.engine import SamplingParams, TorchEngine
from covey.learner import completion_logprobs
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies.april import APRIL
from covey.strategies.base import RolloutContext
from covey.train.checkpoint import load_checkpoint
from covey.train.config import validate_config
from covey.train.trainer import Trainer
from tests._kill_resume import kill_and_resume

STOPS = list("abcdefghijklmnopqrstuvwxyz0123456789")  # frequent stops on the random tiny model: a long-tailed length mix


def _ctx(engine, tok, step, pool, items):
    def draw(k):
        return [Draw(pool.pop(0), 3) for _ in range(k)]

    sp = lambda r: SamplingParams(seed=100 * step + r, max_new_tokens=12, stop_strings=tuple(STOPS))  # noqa: E731
    return RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, 3) for it in items], sampling=sp,
                          score=lambda b: {}, draw=draw, step=step, policy_version=engine.version)  # fmt: skip


def _items(a, b):
    return [{"id": i, "prompt": f"{i}+{i % 7}="} for i in range(a, b)]


def test_april_returns_b_groups_and_carries_the_rest_with_versions():
    model, tok = build_tiny("tiny-llama", seed=11)
    engine = TorchEngine(model, tok, dtype="fp32")
    pool = _items(100, 200)
    strat = APRIL(over_provision=2.0, chunk_tokens=2)
    batch, m = strat.rollout(_items(0, 4), _ctx(engine, tok, 0, pool, _items(0, 4)))
    assert batch.num_groups == 4 and len(batch) == 12 and m["april/inflight_groups"] == 8
    assert m["april/stale_token_frac"] == 0.0 and (batch.policy_version[batch.completion_mask > 0] == 0).all()
    assert int(batch.lengths.max()) <= 12
    buffered = strat.buffer
    assert len(buffered) == 4 - m["april/dropped_groups"] and m["april/buffer_partial_rows"] > 0
    assert all(any(r is None or not r.finish_reason for r in g["rows"]) for g in buffered)  # only unfinished groups
    partial = {(g["item"]["id"], i): list(r.tokens) for g in buffered for i, r in enumerate(g["rows"])
               if r is not None and r.tokens and not r.finish_reason}  # fmt: skip

    # new weights, version 1: carried groups go first; their old tokens keep version 0 and old log-probs
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine.load_weights(model, version=1)
    saved = strat.state_dict()
    again = APRIL(over_provision=2.0, chunk_tokens=2)
    again.load_state_dict(saved)
    b2, m2 = again.rollout(_items(4, 8), _ctx(engine, tok, 1, pool, _items(4, 8)))
    assert m2["april/stale_token_frac"] > 0 and m2["april/carried_groups"] >= 1
    rows = {(it["id"], k): j for j, (it, k) in enumerate(zip(b2.items, _rank(b2.group.tolist())))}
    resumed = [(key, toks) for key, toks in partial.items() if key in rows]
    assert resumed, "no carried partial completion finished in step 2"
    for key, toks in resumed:
        j = rows[key]
        n = len(toks)
        assert b2.completion_ids[j, :n].tolist() == toks  # resumed from exactly the carried token ids
        assert (b2.policy_version[j, :n] == 0).all() and (b2.policy_version[j, n : int(b2.lengths[j])] == 1).all()

    # IS correction: pi_old recomputed with the current (version 1) weights; weight 1 on fresh tokens only
    mask = b2.completion_mask
    with torch.no_grad():
        old, _ = completion_logprobs(model, b2.prompt_ids, b2.completion_ids, mask)
    w, _ = tis(CorrectionInputs(old, b2.behaviour_logprobs, mask), cap=100.0)
    fresh = (b2.policy_version == 1) & (mask > 0)
    stale = (b2.policy_version == 0) & (mask > 0)
    assert torch.allclose(w[fresh], torch.ones_like(w[fresh]), atol=1e-4)
    assert float((w[stale] - 1).abs().mean()) > 1e-2


@pytest.mark.parametrize("keep", [False, True])
def test_finished_surplus_groups_are_dropped_as_in_the_code(keep):
    # one tick of 12 tokens finishes every row: 8 groups done at once, 4 are the batch
    model, tok = build_tiny("tiny-llama", seed=11)
    engine = TorchEngine(model, tok, dtype="fp32")
    pool = _items(100, 200)
    strat = APRIL(over_provision=2.0, chunk_tokens=12, keep_surplus=keep)
    batch, m = strat.rollout(_items(0, 4), _ctx(engine, tok, 0, pool, _items(0, 4)))
    assert batch.num_groups == 4 and m["april/ticks"] == 1
    assert m["april/dropped_groups"] == (0 if keep else 4) and len(strat.buffer) == (4 if keep else 0)
    b2, m2 = strat.rollout(_items(4, 8), _ctx(engine, tok, 1, pool, _items(4, 8)))
    if keep:  # covey's variant: the next step serves the 4 kept groups and generates nothing
        assert m2["april/ticks"] == 0 and m2["april/decoded_tokens"] == 0
        assert {it["id"] for it in b2.items} == {0, 1, 2, 3, 100, 101, 102, 103} - {it["id"] for it in batch.items}
    else:
        assert m2["april/ticks"] == 1 and m2["april/decoded_tokens"] > 0
        assert set(it["id"] for it in b2.items).isdisjoint(it["id"] for it in batch.items)


def test_old_logprobs_recompute_with_the_current_weights():
    from covey.learner.learner import Learner

    model, tok = build_tiny("tiny-llama", seed=11)
    engine = TorchEngine(model, tok, dtype="fp32")
    pool = _items(100, 200)
    strat = APRIL(over_provision=2.0, chunk_tokens=2)
    strat.rollout(_items(0, 4), _ctx(engine, tok, 0, pool, _items(0, 4)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine.load_weights(model, version=1)
    batch, m = strat.rollout(_items(4, 8), _ctx(engine, tok, 1, pool, _items(4, 8)))
    assert m["april/stale_token_frac"] > 0 and batch.recompute_old_logprobs is True
    with torch.no_grad():
        want, _ = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask)
    algo = validate_config({"model": {"name": "tiny-llama"}, "task": {"name": "arithmetic"}, "algo": {"preset": "grpo", "kl": None}}).algo
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.0), None, algo, temperature=1.0, max_new_tokens=12, dtype="fp32")
    batch.advantages = torch.zeros(len(batch))
    learner.update(batch, torch.Generator().manual_seed(0))
    stale = (batch.policy_version == 0) & (batch.completion_mask > 0)
    assert torch.allclose(batch.old_logprobs, want * batch.completion_mask, atol=1e-4)  # the current policy's
    assert float((batch.old_logprobs - batch.behaviour_logprobs)[stale].abs().mean()) > 1e-2  # not the stale one's
    # covey's variant: no request, one update, no correction: pi_old stays the behaviour log-probs
    b3, _ = APRIL(old_logprobs="behaviour").rollout(_items(8, 10), _ctx(engine, tok, 2, pool, _items(8, 10)))
    assert b3.recompute_old_logprobs is False
    b3.advantages = torch.zeros(len(b3))
    learner.update(b3, torch.Generator().manual_seed(0))
    assert b3.old_logprobs is None


def _rank(groups):
    seen, out = {}, []
    for g in groups:
        out.append(seen.get(g, 0))
        seen[g] = out[-1] + 1
    return out


def _raw(tmp_path, **extra):
    return {
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 64, "n_test": 4}},
        "rollout": {"prompts_per_step": 3, "group_size": 2, "strategy": {"name": "april", "chunk_tokens": 2}},
        "sampling": {"max_new_tokens": 10, "stop_strings": STOPS}, "algo": {"preset": "grpo", "kl": None, "correction": {"name": "tis"}},
        "reward_workers": 0, "log": {"progress": False, "tensorboard": False, "dir": str(tmp_path)}, **extra,
    }  # fmt: skip


def test_april_trains_one_step_from_config(tmp_path):
    trainer = Trainer(validate_config(_raw(tmp_path, steps=1)), tmp_path / "run")
    m = trainer.step()
    assert m["april/inflight_groups"] == 6 and m["time/step"] > 0
    trainer.close()


@pytest.mark.slow  # three CLI runs of 4 steps: ~40 s on an idle core
def test_carried_completions_resume_exactly_after_sigkill(tmp_path):

    def has_partials(path):
        ckpt, _ = load_checkpoint(path)
        carried = [r for g in ckpt["strategy"]["buffer"] for r in g["rows"] if r is not None and len(r["tokens"]) and not r["finish_reason"]]
        assert carried, "the step-2 checkpoint holds no partial completion: the test would not test resuming"

    a, _, _ = kill_and_resume(tmp_path, _raw(tmp_path, steps=4, checkpoint={"every": 2}), inspect=has_partials)
    assert any(r["april/stale_token_frac"] > 0 for r in a[2:])
