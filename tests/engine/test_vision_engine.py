"""The torch engine with a vision-language model (covey.engine.vision): behaviour log-probs equal the
learner's in fp32, one image prefill per group, the decode loop's features (seeds, stops, limits,
compaction) unchanged, sampled image placeholders end a row, refusals."""

import pytest
import torch
from PIL import Image

from covey.engine import SamplingParams, TorchEngine
from covey.learner.logprobs import completion_logprobs
from covey.models import apply_chat, load
from covey.rollouts import Rollouts


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-qwen2-vl")


def _prompts(tok):
    red, green = Image.new("RGB", (56, 84), (200, 10, 10)), Image.new("RGB", (112, 56), (10, 200, 10))
    chats = [
        [{"role": "user", "content": [{"type": "image", "image": red}, {"type": "text", "text": "What color?"}]}],
        [{"role": "user", "content": [{"type": "text", "text": "Two: "}, {"type": "image", "image": green},
                                      {"type": "image", "image": red}, {"type": "text", "text": "Which is wider?"}]}],
        [{"role": "user", "content": "no image here"}],
    ]  # fmt: skip
    return [apply_chat(tok, c) for c in chats]


def _batch(gen) -> Rollouts:
    return Rollouts.from_generation(gen, group=gen.prompt_index, items=[{"id": int(i)} for i in gen.prompt_index])


def test_behaviour_logprobs_equal_the_learners_in_fp32(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok, dtype="fp32")
    gen = engine.generate(_prompts(tok), 3, SamplingParams(max_new_tokens=16, seed=1))
    batch = _batch(gen)
    assert len(batch.vision) == 9 and batch.vision[0] is batch.vision[2] and batch.vision[6] is None
    logp, _ = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, vision=batch.vision)
    gap = ((logp - batch.behaviour_logprobs).abs() * batch.completion_mask).max()
    assert gap < 1e-5
    # the images matter: the same ids without their images give other log-probs (or no forward at all)
    other = [None if v is None else type(v)({k: t.flip(0) for k, t in v.tensors.items() if k == "pixel_values"} |
             {k: t for k, t in v.tensors.items() if k != "pixel_values"}) for v in batch.vision]  # fmt: skip
    moved, _ = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, vision=other)
    assert ((moved - logp).abs() * batch.completion_mask)[:6].max() > 1e-3


def test_a_group_shares_one_image_prefill(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok, dtype="fp32")
    seen = []
    hook = model.model.visual.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[0]))
    try:
        prompts = _prompts(tok)
        engine.generate(prompts, 8, SamplingParams(max_new_tokens=4, seed=0))
    finally:
        hook.remove()
    patches = sum(p.vision.tensors["pixel_values"].shape[0] for p in prompts if p.vision is not None)
    assert seen == [patches]  # one vision-tower call over the distinct prompts' images, not 8 per prompt


def test_seeded_generation_repeats_and_does_not_depend_on_compaction_or_waves(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    sp = SamplingParams(max_new_tokens=12, seed=7, stop_token_ids=(40, 41, 42))
    a = TorchEngine(model, tok, dtype="fp32").generate(prompts, 3, sp)
    b = TorchEngine(model, tok, dtype="fp32", compaction=False, prefill_rows=1, max_rows=3).generate(prompts, 3, sp)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert a.finish_reason == b.finish_reason and "stop" in a.finish_reason
    assert [v is None for v in b.vision] == [False] * 6 + [True] * 3


def test_per_prompt_limits_and_stop_strings_work_with_images(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok, dtype="fp32")
    gen = engine.generate(_prompts(tok), 2, SamplingParams(max_new_tokens=10, seed=3, prompt_max_new_tokens=(2, 10, 5)))
    assert gen.lengths[:2].tolist() == [2, 2] and int(gen.lengths[4:].max()) <= 5
    text = tok.decode(gen.completion_ids[0, :2])
    stopped = engine.generate(_prompts(tok)[:1], 1, SamplingParams(max_new_tokens=10, seed=3, stop_strings=(text[-1],)))
    assert stopped.finish_reason == ["stop"] and tok.decode(stopped.completion_ids[0, : int(stopped.lengths[0])]).endswith(text[-1])


def test_a_sampled_image_placeholder_ends_its_row_and_the_learner_still_agrees(tiny):
    model, tok = tiny
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    with torch.no_grad():  # make the placeholder likely: the head's row for it points along the mean hidden state
        head = model.get_output_embeddings().weight
        saved = head[pad].clone()
        head[pad] = head.mean(0) * 0 + 3.0
    try:
        engine = TorchEngine(model, tok, dtype="fp32")
        gen = engine.generate(_prompts(tok), 4, SamplingParams(max_new_tokens=8, seed=0, ignore_eos=True))
        ends = [int(gen.completion_ids[i, int(gen.lengths[i]) - 1]) for i in range(len(gen))]
        assert pad in ends
        for i, e in enumerate(ends):  # a placeholder only ever ends a row, as a stop
            row = gen.completion_ids[i, : int(gen.lengths[i])].tolist()
            assert pad not in row[:-1] and (e != pad or gen.finish_reason[i] == "stop")
        batch = _batch(gen)
        logp, _ = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, vision=batch.vision)
        assert ((logp - batch.behaviour_logprobs).abs() * batch.completion_mask).max() < 1e-5
    finally:
        with torch.no_grad():
            model.get_output_embeddings().weight[pad] = saved


def test_bf16_engine_generates_close_to_fp32_and_load_weights_copies_in(tiny):
    model, tok = tiny
    prompts = _prompts(tok)[:1]
    fp = TorchEngine(model, tok, dtype="fp32").generate(prompts, 2, SamplingParams(max_new_tokens=6, seed=2))
    bf = TorchEngine(model, tok, dtype="bf16").generate(prompts, 2, SamplingParams(max_new_tokens=6, seed=2))
    assert bf.completion_ids.shape[0] == 2 and (bf.logprobs - fp.logprobs).abs().max() < 0.5
    other, _ = load("tiny-qwen2-vl", seed=1)
    engine = TorchEngine(other, tok, dtype="fp32")
    assert not torch.equal(engine.generate(prompts, 2, SamplingParams(max_new_tokens=6, seed=2)).logprobs, fp.logprobs)
    engine.load_weights(model.state_dict(), version=5)
    again = engine.generate(prompts, 2, SamplingParams(max_new_tokens=6, seed=2))
    assert torch.equal(again.completion_ids, fp.completion_ids) and again.policy_version.max() == 5


def test_refusals(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok, dtype="fp32")
    with pytest.raises(ValueError, match="tree sessions are not built"):
        engine.tree_session(SamplingParams())
    with pytest.raises(ValueError, match="hidden_states is not built"):
        engine.hidden_states([[1, 2]])
    with pytest.raises(ValueError, match="quantize"):
        TorchEngine(model, tok, quantize="int8")
    text_model, text_tok = load("tiny-llama")
    with pytest.raises(ValueError, match="text-only LM"):
        TorchEngine(text_model, text_tok).generate(_prompts(tok)[:1], 1, SamplingParams(max_new_tokens=2))


def test_vllm_gets_the_text_and_images_of_an_image_prompt_and_the_ids_of_a_text_one(tiny):
    from covey.engine.vllm_engine import VllmEngine, vllm_prompt  # importable without vLLM (it loads at build)

    _, tok = tiny
    image_prompt, _, text_prompt = _prompts(tok)
    req = vllm_prompt(list(image_prompt), image_prompt.vision)
    assert req["prompt"] == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What color?<|im_end|>\n<|im_start|>assistant\n"
    assert req["multi_modal_data"]["image"] == list(image_prompt.vision.images) and len(req["multi_modal_data"]["image"]) == 1
    assert vllm_prompt(list(text_prompt), None) == {"prompt_token_ids": list(text_prompt)}
    assert VllmEngine.caps.takes_images and TorchEngine.caps.takes_images
