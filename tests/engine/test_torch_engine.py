"""TorchEngine: equality with HF greedy decoding, seeding, stops, compaction, weights, log-probs."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.learner.logprobs import completion_logprobs
from covey.models import load

# A wider init than the default 0.02 spreads the logits, so greedy argmax ties (which fp32
# rounding could break either way) do not occur.
INIT = 0.2


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2"])
def tiny(request):
    return load(request.param, initializer_range=INIT, seed=5)


def _prompts(tok):
    return [tok.encode("What is 12+7?"), tok.encode("1"), tok.encode("hello, world: abc")]  # ragged


def test_greedy_equals_hf_generate_token_for_token(tiny):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    prompts = _prompts(tok)
    out = engine.generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=24, ignore_eos=True))
    for i, p in enumerate(prompts):
        ref = model.generate(
            torch.tensor([p]), max_new_tokens=24, do_sample=False, min_new_tokens=24, pad_token_id=tok.pad_token_id
        )[0, len(p) :]
        assert out.completion_ids[i].tolist() == ref.tolist()
    assert out.finish_reason == ["length"] * 3


def test_greedy_batch_equals_hf_left_padded_batch(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    ref = model.generate(ids, attention_mask=mask, max_new_tokens=16, min_new_tokens=16, do_sample=False)
    out = TorchEngine(model, dtype="fp32").generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=16, ignore_eos=True))
    assert torch.equal(out.completion_ids, ref[:, width:])


def test_sampling_is_reproducible_by_seed_and_differs_across_seeds(tiny):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    sp = dict(max_new_tokens=20, ignore_eos=True, temperature=1.3)
    a = engine.generate(_prompts(tok), 2, SamplingParams(seed=7, **sp))
    b = engine.generate(_prompts(tok), 2, SamplingParams(seed=7, **sp))
    c = engine.generate(_prompts(tok), 2, SamplingParams(seed=8, **sp))
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.completion_ids, c.completion_ids)
    assert not torch.equal(a.completion_ids[0], a.completion_ids[1])  # the n samples of a prompt differ


def test_rollouts_layout_groups_and_prompts(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    out = TorchEngine(model, dtype="fp32").generate(prompts, 3, SamplingParams(seed=0, max_new_tokens=5, ignore_eos=True))
    assert out.prompt_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [p.tolist() for p in out.prompt_ids] == [p for p in prompts for _ in range(3)]
    assert out.completion_ids.shape == (9, 5) and out.completion_mask.sum() == 45


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_equal_teacher_forced_logprobs(tiny, temperature):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    sp = SamplingParams(seed=3, temperature=temperature, top_k=40, max_new_tokens=20, return_entropies=True)
    out = engine.generate(_prompts(tok), 2, sp)
    logp, ent = completion_logprobs(
        model, out.prompt_ids, out.completion_ids, out.completion_mask, temperature=temperature, with_entropy=True
    )
    assert (logp - out.logprobs).abs().max() < 1e-4
    assert (ent - out.entropies).abs().max() < 1e-4
    assert (out.logprobs[out.completion_mask == 0] == 0).all()


def _stopping_engine(tiny):
    model, tok = tiny
    return TorchEngine(model, dtype="fp32", tokenizer=tok), tok


def test_stop_token_ends_row_with_stop_and_mask_through_it(tiny):
    engine, tok = _stopping_engine(tiny)
    prompts = _prompts(tok)
    free = engine.generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=20, ignore_eos=True))
    stop_tok = int(free.completion_ids[0, 6])
    first = free.completion_ids[0].tolist().index(stop_tok)  # first occurrence ends the row
    out = engine.generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=20, stop_token_ids=(stop_tok,), ignore_eos=True))
    assert out.finish_reason[0] == "stop"
    assert out.lengths[0] == first + 1 and out.completion_ids[0, first] == stop_tok
    assert out.completion_mask[0, : first + 1].eq(1).all() and out.completion_mask[0, first + 1 :].eq(0).all()
    assert (out.completion_ids[0, first + 1 :] == tok.pad_token_id).all()
    for i in (1, 2):  # other rows: stopped at their own first stop token, or ran out of budget
        row = free.completion_ids[i].tolist()
        if stop_tok in row:
            assert out.finish_reason[i] == "stop" and out.lengths[i] == row.index(stop_tok) + 1
        else:
            assert out.finish_reason[i] == "length" and out.lengths[i] == 20


def test_eos_is_a_default_stop_token(tiny):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    assert tok.eos_token_id in engine.eos_ids
    free = engine.generate(_prompts(tok), 4, SamplingParams(seed=1, max_new_tokens=30, ignore_eos=True))
    out = engine.generate(_prompts(tok), 4, SamplingParams(seed=1, max_new_tokens=30))
    for i in range(len(out)):
        row = free.completion_ids[i].tolist()
        if tok.eos_token_id in row:  # same draws up to the EOS, then the row ends there
            end = row.index(tok.eos_token_id) + 1
            assert out.finish_reason[i] == "stop" and out.completion_ids[i, :end].tolist() == row[:end]
        else:
            assert out.finish_reason[i] == "length" and out.completion_ids[i].tolist() == row


def test_stop_string_ends_row_at_the_token_completing_it(tiny):
    engine, tok = _stopping_engine(tiny)
    prompts = _prompts(tok)
    free = engine.generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=20, ignore_eos=True))
    text_ids = free.completion_ids[0].tolist()
    stop = tok.decode(text_ids[5:7])  # two characters the row is known to produce
    ends = [k for k in range(1, 21) if stop in tok.decode(text_ids[:k])]
    out = engine.generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=20, stop_strings=(stop,), ignore_eos=True))
    assert out.finish_reason[0] == "stop" and out.lengths[0] == ends[0]
    assert stop in tok.decode(out.completion_ids[0, : out.lengths[0]].tolist())


def test_budget_exhaustion_is_length():
    model, tok = load("tiny-llama", initializer_range=INIT)
    out = TorchEngine(model, dtype="fp32", tokenizer=tok).generate(
        [tok.encode("ab")], 2, SamplingParams(seed=0, max_new_tokens=3, ignore_eos=True)
    )
    assert out.finish_reason == ["length", "length"] and out.lengths.tolist() == [3, 3]


def test_compaction_gives_the_same_tokens_as_no_compaction(tiny):
    model, tok = tiny
    # Many stop tokens so rows end at different steps and the batch is compacted repeatedly.
    sp = SamplingParams(seed=11, max_new_tokens=25, stop_token_ids=tuple(range(40, 90)), ignore_eos=True)
    prompts = _prompts(tok) * 3
    on = TorchEngine(model, dtype="fp32", compact_fraction=0.01).generate(prompts, 3, sp)
    off = TorchEngine(model, dtype="fp32", compaction=False).generate(prompts, 3, sp)
    assert len(set(on.lengths.tolist())) > 3  # rows really finished at different times
    assert torch.equal(on.completion_ids, off.completion_ids)
    assert on.finish_reason == off.finish_reason
    # the batch size changes BLAS blocking, so log-probs agree to rounding, not bit for bit
    assert torch.allclose(on.logprobs, off.logprobs, atol=1e-4)


def test_fp32_engine_shares_weights_and_sees_in_place_updates():
    model, tok = load("tiny-llama", initializer_range=INIT)
    engine = TorchEngine(model, dtype="fp32")
    assert engine.shares_weights
    sp = SamplingParams(greedy=True, max_new_tokens=10, ignore_eos=True)
    before = engine.generate([tok.encode("abc")], 1, sp).completion_ids
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    engine.load_weights(model)  # free: every tensor is already shared
    after = engine.generate([tok.encode("abc")], 1, sp).completion_ids
    assert not torch.equal(before, after)
    fresh = TorchEngine(model, dtype="fp32").generate([tok.encode("abc")], 1, sp).completion_ids
    assert torch.equal(after, fresh)


def test_bf16_copy_refreshes_from_learner_weights():
    learner, tok = load("tiny-qwen2", initializer_range=INIT, seed=1)
    other, _ = load("tiny-qwen2", initializer_range=INIT, seed=2)
    engine = TorchEngine(learner, dtype="bf16")
    assert not engine.shares_weights
    sp = SamplingParams(greedy=True, max_new_tokens=12, ignore_eos=True)
    prompt = [tok.encode("12+7=")]
    engine.load_weights(other.state_dict())
    ref = TorchEngine(other, dtype="bf16").generate(prompt, 1, sp)
    got = engine.generate(prompt, 1, sp)
    assert torch.equal(got.completion_ids, ref.completion_ids)
    assert torch.equal(got.logprobs, ref.logprobs)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_bf16_engine_logprobs_are_close_to_fp32(name):
    model, tok = load(name)  # default init: realistic logit scale (bf16 error grows with it)
    sp = SamplingParams(seed=2, max_new_tokens=12, ignore_eos=True)
    out = TorchEngine(model, dtype="bf16").generate(_prompts(tok), 2, sp)
    logp, _ = completion_logprobs(model, out.prompt_ids, out.completion_ids, out.completion_mask)
    assert (logp - out.logprobs).abs().max() < 0.05


def test_bad_inputs_raise_clear_errors(tiny):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32")
    with pytest.raises(ValueError, match="prompts\\[1\\] is empty"):
        engine.generate([[1, 2], []], 1, SamplingParams())
    with pytest.raises(ValueError, match="n must be >= 1"):
        engine.generate([[1, 2]], 0, SamplingParams())
    with pytest.raises(ValueError, match="max_positions"):
        engine.generate([[1, 2]], 1, SamplingParams(max_new_tokens=10**6))
    with pytest.raises(ValueError, match="need a tokenizer"):
        engine.generate([[1, 2]], 1, SamplingParams(stop_strings=("x",)))
    with pytest.raises(ValueError, match="dtype must be one of"):
        TorchEngine(model, dtype="int8")


def test_waves_of_rows_give_the_same_rollouts_as_one_batch(tiny):
    model, tok = tiny
    sp = SamplingParams(seed=4, max_new_tokens=15, stop_token_ids=tuple(range(40, 60)), ignore_eos=True)
    one = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 3, sp)
    waves = TorchEngine(model, dtype="fp32", max_rows=4).generate(_prompts(tok), 3, sp)  # 1 prompt (3 rows) a wave
    by_memory = TorchEngine(model, dtype="fp32", max_cache_bytes=1).generate(_prompts(tok), 3, sp)  # same, by budget
    assert torch.equal(one.completion_ids, waves.completion_ids)
    assert torch.equal(one.completion_ids, by_memory.completion_ids)
    assert torch.equal(one.prompt_index, waves.prompt_index) and one.finish_reason == waves.finish_reason
    assert torch.allclose(one.logprobs, waves.logprobs, atol=1e-4)


def test_rollout_tensors_can_enter_the_learners_autograd_graph(tiny):
    model, tok = tiny
    out = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 2, SamplingParams(seed=0, max_new_tokens=6))
    logp, _ = completion_logprobs(model, out.prompt_ids, out.completion_ids, out.completion_mask)
    ratio = (logp - out.logprobs).exp()
    (ratio * out.completion_mask).sum().backward()  # inference-mode tensors would fail here
    assert not out.completion_mask.is_inference() and not out.logprobs.is_inference()


@pytest.mark.parametrize("kind", ["qwen3", "mistral"])
def test_other_llama_family_architectures_match_hf_greedy(kind):
    """Qwen3 adds per-head q/k RMSNorm; Mistral is Llama-shaped (no sliding window here)."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from covey.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    cfg_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "mistral": (MistralConfig, MistralForCausalLM)}[kind]
    extra = {"sliding_window": None} if kind == "mistral" else {"head_dim": 32}
    cfg = cfg_cls(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=INIT, **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    model = model_cls(cfg).eval()
    prompts = _prompts(tok)
    out = TorchEngine(model, dtype="fp32").generate(prompts, 1, SamplingParams(greedy=True, max_new_tokens=10, ignore_eos=True))
    for i, p in enumerate(prompts):
        ref = model.generate(torch.tensor([p]), max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
        assert out.completion_ids[i].tolist() == ref[0, len(p) :].tolist()
