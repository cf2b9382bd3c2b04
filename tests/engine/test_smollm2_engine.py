"""The real model through the engine: SmolLM2-135M-Instruct (converted once into covey's cache)."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import apply_chat, load


@pytest.mark.slow
def test_smollm2_engine_answers_and_fp32_greedy_matches_hf():
    model, tok = load("smollm2-135m-instruct")  # converts into the covey cache on first use
    ids = apply_chat(tok, [{"role": "user", "content": "What is 2+3?"}])

    engine = TorchEngine(model, dtype="bf16", tokenizer=tok)
    out = engine.generate([ids], 1, SamplingParams(greedy=True, max_new_tokens=24))
    text = tok.decode(out.completion_ids[0, : out.lengths[0]].tolist())
    assert "5" in text
    assert out.finish_reason == ["stop"] and out.completion_ids[0, out.lengths[0] - 1] == tok.eos_token_id

    fp32 = TorchEngine(model, dtype="fp32", tokenizer=tok)
    got = fp32.generate([ids], 1, SamplingParams(greedy=True, max_new_tokens=16))
    ref = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)  # stops at EOS too
    assert got.completion_ids[0, : got.lengths[0]].tolist() == ref[0, len(ids) :].tolist()
