"""Per-prompt max_new_tokens: TorchEngine stops a prompt's rows at its limit, like the global limit."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import load
from covey.samplers import Draw
from covey.strategies.group import sample_groups


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-llama", initializer_range=0.2, seed=5)


def _prompts(tok):
    return [tok.encode("What is 12+7?"), tok.encode("1"), tok.encode("hello, world: abc")]


@pytest.mark.parametrize("compaction,sync_every", [(True, 1), (False, 1), (True, 4)])  # 4: host checks as on CUDA
def test_limited_rows_are_the_unlimited_rows_cut_at_the_limit(tiny, compaction, sync_every):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok, compaction=compaction, sync_every=sync_every)
    sp = dict(max_new_tokens=12, ignore_eos=True, temperature=1.2, seed=3)
    full = engine.generate(_prompts(tok), 2, SamplingParams(**sp))
    cut = engine.generate(_prompts(tok), 2, SamplingParams(prompt_max_new_tokens=(5, 12, 1), **sp))
    assert cut.lengths.tolist() == [5, 5, 12, 12, 1, 1]
    assert cut.finish_reason == ["length"] * 6
    for row, n in enumerate(cut.lengths.tolist()):  # same uniforms per (row, step): same tokens up to the limit
        assert cut.completion_ids[row, :n].tolist() == full.completion_ids[row, :n].tolist()
        assert torch.allclose(cut.logprobs[row, :n], full.logprobs[row, :n], atol=1e-5)  # batch shapes differ
    assert torch.equal(cut.completion_ids[2:4], full.completion_ids[2:4])  # the unlimited prompt is unchanged
    assert cut.completion_mask[0].tolist() == [1.0] * 5 + [0.0] * 7


def test_a_stop_before_the_limit_is_still_a_stop(tiny):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    sp = dict(max_new_tokens=10, greedy=True, ignore_eos=True)
    free = engine.generate(_prompts(tok)[:1], 1, SamplingParams(**sp))
    second = int(free.completion_ids[0, 1])  # make the 2nd greedy token a stop token
    out = engine.generate(_prompts(tok)[:1], 1, SamplingParams(stop_token_ids=(second,), prompt_max_new_tokens=(6,), **sp))
    assert out.lengths.tolist() == [2] and out.finish_reason == ["stop"]
    out = engine.generate(_prompts(tok)[:1], 1, SamplingParams(stop_token_ids=(second,), prompt_max_new_tokens=(2,), **sp))
    assert out.finish_reason == ["stop"]  # the stop token is the limit's last token: a stop, like the global limit


def test_limits_survive_waves(tiny):
    model, tok = tiny
    sp = SamplingParams(max_new_tokens=8, ignore_eos=True, seed=1, prompt_max_new_tokens=(3, 8, 6))
    one = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 2, sp)
    waves = TorchEngine(model, dtype="fp32", max_rows=2).generate(_prompts(tok), 2, sp)  # one prompt per wave
    assert one.lengths.tolist() == waves.lengths.tolist() == [3, 3, 8, 8, 6, 6]
    assert torch.equal(one.completion_ids, waves.completion_ids)


def test_sample_groups_applies_each_draws_limit(tiny):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    draws = [Draw({"id": 7, "prompt": "a"}, 2), Draw({"id": 9, "prompt": "b"}, 1, 2), Draw({"id": 4, "prompt": "c"}, 2, 50)]
    sp = SamplingParams(max_new_tokens=6, ignore_eos=True, seed=2)
    batch = sample_groups(engine, tok, draws, sp)
    by_item = {(int(p), int(n)) for p, n in zip(batch.prompt_id, batch.lengths)}
    assert by_item == {(7, 6), (9, 2), (4, 6)}  # 50 is capped at max_new_tokens


def test_bad_limits_raise_clear_errors(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match=r"prompt_max_new_tokens\[1\] = 0.*\[1, max_new_tokens=8\]"):
        SamplingParams(max_new_tokens=8, prompt_max_new_tokens=(3, 0))
    with pytest.raises(ValueError, match=r"prompt_max_new_tokens\[0\] = 9"):
        SamplingParams(max_new_tokens=8, prompt_max_new_tokens=(9,))
    with pytest.raises(ValueError, match="max_new_tokens = 2.5 must be None or an int >= 1"):
        Draw({"id": 5, "prompt": "a"}, 1, 2.5)
    with pytest.raises(ValueError, match="holds 2 limits for 3 prompts"):
        TorchEngine(model, dtype="fp32").generate(_prompts(tok), 1, SamplingParams(max_new_tokens=4, prompt_max_new_tokens=(2, 2)))
