"""`sol_rl_provisional` (Sol-RL, reconstructed) and the engine's parts: the contrastive choice by hand,
`regenerate` re-drawing chosen rows with the same uniforms on the unquantized weights, the fp8 quantizer
against hand values (its kernel path needs a GPU: not run here) and the strategy on an int8 engine."""

import dataclasses

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.engine.forward import Fp8Linear, check_fp8, fp8_linear
from covey.models import build_tiny
from covey.samplers import Draw
from covey.strategies import STRATEGIES
from covey.strategies.base import RolloutContext
from covey.strategies.sol_rl import contrastive_rows

PROMPTS = [[5, 6, 7], [9, 10]]
SP = SamplingParams(max_new_tokens=6, seed=3, ignore_eos=True)


def test_contrastive_rows_hand_values():
    assert contrastive_rows([0.2, 1.0, 0.0, 1.0, 0.5, 0.0], 2, 2) == [1, 3, 2, 5]  # ties: the earlier row first
    assert contrastive_rows([0.2, 1.0, 0.0, 1.0, 0.5, 0.0], 3, 1) == [1, 3, 4, 2]
    assert contrastive_rows([1.0, 1.0, 1.0], 1, 1) == [0, 1]  # a row is kept once
    assert contrastive_rows([0.5, 0.1], 0, 2) == [1, 0]
    with pytest.raises(ValueError, match="pool of at least"):
        contrastive_rows([1.0, 0.0], 2, 1)


def _engines():
    model, tok = build_tiny("tiny-llama", seed=4)
    return model, tok, TorchEngine(model, tok, dtype="fp32"), TorchEngine(model, tok, dtype="fp32", quantize="int8")


def test_regenerate_redraws_rows_with_the_same_uniforms_in_full_precision():
    _, _, full, low = _engines()
    ref = full.generate(PROMPTS, 3, SP)
    rows = [4, 0, 5]
    again = full.regenerate(PROMPTS, 3, SP, rows)  # an unquantized engine: the same rows exactly
    assert torch.equal(again.completion_ids, ref.completion_ids[rows]) and again.prompt_index.tolist() == [1, 0, 1]
    assert torch.allclose(again.logprobs, ref.logprobs[rows], atol=1e-6)
    precise = low.regenerate(PROMPTS, 3, SP, rows)  # the int8 engine's rows, regenerated without int8
    assert torch.equal(precise.completion_ids, ref.completion_ids[rows])
    assert torch.allclose(precise.logprobs, ref.logprobs[rows], atol=1e-4)
    lo = low.generate(PROMPTS, 3, SP)
    assert (lo.logprobs - ref.logprobs).abs().max() > 1e-4  # int8 sampling differs from full precision
    assert low.low_precision and not full.low_precision
    with pytest.raises(ValueError, match="needs sampling.seed"):
        low.regenerate(PROMPTS, 3, dataclasses.replace(SP, seed=None), [0])
    with pytest.raises(ValueError, match="rows must index the 6 rows"):
        low.regenerate(PROMPTS, 3, SP, [6])


def test_fp8_quantizer_hand_values():
    w = torch.tensor([[1.0, -2.0, 0.5], [448.0, 0.0, -224.0], [1.0, 0.3, 0.0]])
    q = Fp8Linear.quantize(w, torch.tensor([0.0, 1.0, 0.0]))
    assert q.weight.dtype == torch.float8_e4m3fn
    assert q.scale.tolist() == pytest.approx([2 / 448, 1.0, 1 / 448])
    deq = q.weight.float() * q.scale[:, None]
    assert deq[0].tolist() == pytest.approx([1.0, -2.0, 0.5]) and deq[1].tolist() == [448.0, 0.0, -224.0]
    assert deq[2, 1].item() == pytest.approx(128 / 448)  # 0.3 x 448 = 134.4 -> e4m3 step 16 above 128: 128
    x = torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.0, 0.0]])
    out = fp8_linear(x, q, emulate=True)
    assert torch.allclose(out, torch.tensor([[-0.5, 225.0, 1.0 + 128 / 448], [0.5, 225.0, 0.5]]))  # bias on column 1


def test_fp8_is_refused_without_fp8_matmuls():
    with pytest.raises(ValueError, match="on the CPU use quantize='int8'"):
        check_fp8("cpu")
    model, tok = build_tiny("tiny-llama", seed=4)
    with pytest.raises(ValueError, match="needs a CUDA device with fp8 matmuls"):
        TorchEngine(model, tok, dtype="fp32", quantize="fp8")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        TorchEngine.check_config({"quantize": "fp8"}, None, set(), "cpu")
    with pytest.raises(ValueError, match="quantize: fp8"):
        TorchEngine.check_config({"quantize": "int8"}, None, set(), "cuda")


def _score(batch):
    """A deterministic stand-in reward: the share of even token ids in the completion."""
    ids, mask = batch.completion_ids, batch.completion_mask
    r = ((ids % 2 == 0).float() * mask).sum(1) / mask.sum(1).clamp_min(1)
    batch.rewards, batch.reward_names, batch.reward_weights = r[:, None], ("even",), torch.ones(1)
    return {"even/mean": float(r.mean())}


def _ctx(engine, tok):
    items = [{"id": 0, "prompt": "2+3="}, {"id": 1, "prompt": "4+1="}]
    sp = SamplingParams(max_new_tokens=6, seed=11, ignore_eos=True)
    return items, RolloutContext(engine=engine, tokenizer=tok, draws=[Draw(it, 2) for it in items],
                                 sampling=lambda r: dataclasses.replace(sp, seed=11 + r), score=_score, draw=lambda k: [])  # fmt: skip


def test_strategy_keeps_the_contrastive_rows_regenerated_in_full_precision():
    _, tok, full, low = _engines()
    strat = STRATEGIES.build("sol_rl_provisional", {"pool_factor": 3})
    items, ctx = _ctx(low, tok)
    batch, m = strat.rollout(items, ctx)
    assert len(batch) == 4 and batch.group.tolist() == [0, 0, 1, 1] and m["sol_rl/regenerated"] == 4.0
    # the kept rows' tokens and behaviour log-probs are the full-precision engine's on the same uniforms
    prompts = [batch.prompt_ids[0].tolist(), batch.prompt_ids[2].tolist()]
    ref = full.generate(prompts, 6, ctx.sampling(0))  # the pool's call (2 prompts x 3 x 2) at full precision
    pool = low.generate(prompts, 6, ctx.sampling(0))
    pool_r = ((pool.completion_ids % 2 == 0).float() * pool.completion_mask).sum(1) / pool.completion_mask.sum(1)
    rows = [j * 6 + k for j in range(2) for k in contrastive_rows(pool_r[j * 6 : (j + 1) * 6].tolist(), 1, 1)]
    assert torch.equal(batch.completion_ids, ref.completion_ids[rows])
    assert torch.allclose(batch.behaviour_logprobs, ref.logprobs[rows], atol=1e-4)
    assert m["sol_rl/pool_reward_mean"] == pytest.approx(float(pool_r.mean()))
    # a full-precision engine: the kept pool rows as sampled, nothing regenerated
    items, ctx = _ctx(full, tok)
    batch, m = strat.rollout(items, ctx)
    assert len(batch) == 4 and m["sol_rl/regenerated"] == 0.0 and torch.equal(batch.completion_ids, ref.completion_ids[rows])


def test_bad_parameters():
    with pytest.raises(ValueError, match="pool_factor"):
        STRATEGIES.build("sol_rl_provisional", {"pool_factor": 0})
    with pytest.raises(ValueError, match="best must be"):
        STRATEGIES.build("sol_rl_provisional", {"best": -1})
