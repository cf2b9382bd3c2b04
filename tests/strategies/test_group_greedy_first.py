"""`group` with greedy_first (ArenaRL's rollout, qqr `agent_rollout.py`): the first row of each group of two
or more is the greedy decode, the rest are sampled; arenarl prefers it (a warning at config time without)."""

import logging

import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import apply_chat, build_tiny
from covey.samplers import Draw
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.train.config import load_config

ITEMS = [{"id": 5, "prompt": "3+4="}, {"id": 9, "prompt": "8-1="}, {"id": 2, "prompt": "1+1="}]


def _run(greedy_first, sizes=(4, 3, 1)):
    model, tok = build_tiny("tiny-llama", seed=2)
    engine = TorchEngine(model, tok, dtype="fp32")
    sp = SamplingParams(seed=7, max_new_tokens=6, ignore_eos=True, temperature=1.5)
    ctx = RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, n) for it, n in zip(ITEMS, sizes)],
                         sampling=lambda r: sp, score=lambda b: {}, draw=lambda k: [])  # fmt: skip
    batch, _ = STRATEGIES.build("group", {"greedy_first": greedy_first}).rollout(ITEMS, ctx)
    greedy = engine.generate([apply_chat(tok, it["prompt"]) for it in ITEMS], 1, SamplingParams(**{**sp.__dict__, "greedy": True}))
    return batch, greedy


def test_the_first_row_of_each_group_is_the_greedy_decode():
    batch, greedy = _run(True)
    assert batch.group.tolist() == [0, 0, 0, 0, 1, 1, 1, 2]
    first = [0, 4]  # groups 0 and 1; group 2 has one row: sampled (qqr: only when n_samples_per_prompt > 1)
    for row, g in zip(first, (0, 1)):
        assert batch.completion_ids[row].tolist() == greedy.completion_ids[g].tolist()
        assert torch.allclose(batch.behaviour_logprobs[row], greedy.logprobs[g])  # the tempered distribution's
    others = [r for r in range(len(batch)) if r not in first]
    assert any(batch.completion_ids[r].tolist() != greedy.completion_ids[batch.group[r]].tolist() for r in others)


def test_without_greedy_first_no_row_is_forced_greedy():
    batch, greedy = _run(False, sizes=(4, 4, 4))
    firsts = [batch.completion_ids[4 * g].tolist() for g in range(3)]
    assert firsts != [greedy.completion_ids[g].tolist() for g in range(3)]


def test_arenarl_warns_without_a_greedy_anchor_row(caplog):
    base = ["model.name=tiny-llama", "task.params={digits: 1, n_train: 8, n_test: 4}", "reward_workers=0",
            "rewards=[{name: arenarl, params: {backend: {kind: local, model: tiny-llama}}}]"]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="covey"):
        load_config(None, base)
    assert any("'arenarl' prefers the first row of each group decoded greedily" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="covey"):
        load_config(None, [*base, "rollout.strategy={name: group, greedy_first: true}"])
    assert not [r for r in caplog.records if "greedy" in r.message]
