"""Device handling of the engine, checked on CPU.

The trick: run with torch's default device set to "meta". Every tensor the engine creates without
naming a device then lands on meta, and mixing it with the model's CPU tensors (or reading it back
with .tolist()) fails, so these tests fail for any tensor not placed on the model's device.
"""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.dtypes import cpu_prefers_bf16, measure_matmul_flops, resolve_dtype_name
from covey.engine.forward import _decode_attention, new_cache, pack_weights
from covey.engine.sampling import sample_tokens
from covey.engine.stops import StopStrings
from covey.models import load


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-llama", initializer_range=0.2, seed=5)


def _prompts(tok):
    return [tok.encode("What is 12+7?"), tok.encode("1"), tok.encode("hello, world")]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_engine_creates_every_tensor_on_the_model_device(tiny, dtype):
    model, tok = tiny
    sp = SamplingParams(max_new_tokens=10, seed=3, top_p=0.9, top_k=50, return_entropies=True, stop_strings=("a",))
    ref = TorchEngine(model, dtype=dtype, tokenizer=tok, compact_fraction=0.1).generate(_prompts(tok), 2, sp)
    with torch.device("meta"):
        engine = TorchEngine(model, dtype=dtype, tokenizer=tok, compact_fraction=0.1)
        out = engine.generate(_prompts(tok), 2, sp)
        scratch = [t.device.type for t in engine._scratch.values()]
    assert scratch and set(scratch) == {"cpu"}
    assert out.completion_ids.device.type == "cpu" and out.logprobs.device.type == "cpu"
    assert torch.equal(out.completion_ids, ref.completion_ids)
    assert torch.equal(out.logprobs, ref.logprobs)
    assert engine.device == torch.device("cpu")


def test_cache_and_weights_follow_the_model_device(tiny):
    model, _ = tiny
    with torch.device("meta"):
        w = pack_weights(model, torch.bfloat16, 64)
        kv = new_cache(w, 3, 16, torch.bfloat16)
    assert kv.k.device.type == "cpu" and kv.v.device.type == "cpu"
    assert w.rope_cos.device.type == "cpu" and w.layers[0].wqkv.device.type == "cpu"


def test_sampling_does_not_depend_on_sync_every(tiny):
    """On CUDA finished rows are only counted every k steps; the tokens must not change."""
    model, tok = tiny
    free = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 3, SamplingParams(max_new_tokens=16, seed=1, ignore_eos=True))
    stop_ids = tuple(sorted(set(free.completion_ids[::2, 3].tolist())))  # tokens some rows sample at step 3
    sp = SamplingParams(max_new_tokens=16, seed=1, stop_token_ids=stop_ids, ignore_eos=True)
    a = TorchEngine(model, dtype="fp32", sync_every=1).generate(_prompts(tok), 3, sp)
    b = TorchEngine(model, dtype="fp32", sync_every=5).generate(_prompts(tok), 3, sp)
    assert "stop" in a.finish_reason  # some rows did stop early
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.completion_mask, b.completion_mask)
    assert a.finish_reason == b.finish_reason  # log-probs: compaction at other steps = other batch sizes, rounding
    assert (a.logprobs - b.logprobs).abs().max() < 1e-4
    with pytest.raises(ValueError, match="sync_every"):
        TorchEngine(model, sync_every=0)


def test_sdpa_decode_attention_equals_the_matmul_path():
    g = torch.Generator().manual_seed(0)
    q, keys_t, vals = torch.randn(3, 2, 4, 8, generator=g), torch.randn(3, 2, 8, 6, generator=g), torch.randn(3, 2, 6, 8, generator=g)
    bias = torch.zeros(3, 1, 1, 6).masked_fill_(torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])[:, None, None] == 0, float("-inf"))
    for b in (None, bias):
        ref = _decode_attention(q, keys_t, vals, b, sdpa=False)
        assert (ref - _decode_attention(q, keys_t, vals, b, sdpa=True)).abs().max() < 1e-5


def test_engine_with_sdpa_decode_matches_default(tiny, monkeypatch):
    """The CUDA decode path (sdpa=True) run on CPU gives the same greedy tokens."""
    import covey.engine.torch_engine as te
    from covey.engine import forward

    model, tok = tiny
    sp = SamplingParams(greedy=True, max_new_tokens=12, ignore_eos=True)
    ref = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 1, sp)
    monkeypatch.setattr(te, "decode_step", lambda *a: forward.decode_step(*a, sdpa=True))
    out = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 1, sp)
    assert torch.equal(out.completion_ids, ref.completion_ids)
    assert (out.logprobs - ref.logprobs).abs().max() < 1e-4


def test_sampling_without_scratch_uses_the_logits_device():
    logits = torch.randn(4, 300)
    with torch.device("meta"):
        tok, lp, ent = sample_tokens(logits, temperature=1.0, greedy=False, top_p=0.8, uniforms=torch.rand(4, device="cpu"),
                                     with_entropy=True)  # fmt: skip
    assert tok.device.type == lp.device.type == ent.device.type == "cpu"


def test_stop_strings_accept_inputs_on_any_device(tiny):
    _, tok = tiny
    stops = StopStrings(tok, ("ab",), 512)
    ids = tok.encode("xab", add_special_tokens=False)
    out_tok = torch.tensor([ids + [0] * 3])
    with torch.device("meta"):
        done = stops.check(out_tok, torch.tensor([0], device="cpu"), out_tok[:, len(ids) - 1], torch.ones(1, dtype=torch.bool, device="cpu"), len(ids) - 1)
    assert done.device.type == "cpu" and done.tolist() == [True]


def test_dtype_auto_resolves_by_device_and_measurement():
    assert resolve_dtype_name("bf16", "cpu") == "bf16" and resolve_dtype_name("float32", "cpu") == "fp32"
    flops = measure_matmul_flops(64, rounds=1, seconds=0.002)
    assert flops["bf16"] > 0 and flops["fp32"] > 0
    choice = resolve_dtype_name("auto", "cpu", 64)
    assert choice == ("bf16" if cpu_prefers_bf16(64, torch.get_num_threads()) else "fp32")  # cached: same answer
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype_name("int8", "cpu")


def test_engine_dtype_auto(tiny):
    model, _ = tiny
    engine = TorchEngine(model, dtype="auto")
    assert engine.dtype in (torch.bfloat16, torch.float32)
    with pytest.raises(ValueError, match="auto"):
        TorchEngine(model, dtype="fp8")
