"""The loading path of each supported VLM family, offline, with tiny random configs (docs/vlm.md):
a folder saved from a config loads through `covey.models.load` (`AutoModelForImageTextToText` +
`AutoProcessor`, or the rebuilt processor), and the torch engine's behaviour log-probs equal the
learner's in fp32. Qwen2-VL is tests/models/test_vision.py's tiny-qwen2-vl.

SmolVLM: its processor needs torchvision (a video processor) and num2words, absent here, so the SmolVLM
model runs with Idefics3's processor (the same image-token scheme); SmolVLM's own processor is untested.
"""

import pytest
import torch
from PIL import Image

from covey.engine import SamplingParams, TorchEngine
from covey.learner.logprobs import completion_logprobs
from covey.models import apply_chat, load
from covey.models.tiny import build_tiny_tokenizer
from covey.models.vision import VisionTokenizer
from covey.rollouts import Rollouts

IDEFICS_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
IDEFICS_TEMPLATE = ("{% for message in messages %}{{ message['role'] | capitalize }}{{ ':' }}{% for part in message['content'] %}"
                    "{% if part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
                    "{% endfor %}{{ '<end_of_utterance>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)




def _idefics_parts():
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = build_tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": IDEFICS_TOKENS})
    ip = Idefics3ImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=False)
    return tok, Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=4, chat_template=IDEFICS_TEMPLATE)


def qwen2_5_vl(folder):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from covey.models.tiny_vision import CHAT_TEMPLATE_VL, VISION_TOKENS
    from covey.models.vision_loading import ImageOnlyQwen2VLProcessor

    tok = build_tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    proc = ImageOnlyQwen2VLProcessor(image_processor=Qwen2VLImageProcessorPil(min_pixels=784, max_pixels=784 * 16), tokenizer=tok,
                                     chat_template=CHAT_TEMPLATE_VL)  # fmt: skip
    ids = dict(zip(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"), tok.convert_tokens_to_ids(VISION_TOKENS)))
    text = dict(TEXT, vocab_size=len(tok), rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                pad_token_id=0, eos_token_id=2, bos_token_id=1)  # fmt: skip
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])  # fmt: skip
    return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)), proc


def idefics3(folder, config_cls="Idefics3Config", model_cls="Idefics3ForConditionalGeneration"):
    import transformers

    tok, proc = _idefics_parts()
    config = getattr(transformers, config_cls)(
        text_config=dict(TEXT, model_type="llama", vocab_size=len(tok), pad_token_id=0),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8),
        scale_factor=2, image_token_id=tok.convert_tokens_to_ids("<image>"))
    return getattr(transformers, model_cls)(config), proc


def smolvlm(folder):
    return idefics3(folder, "SmolVLMConfig", "SmolVLMForConditionalGeneration")


def gemma3(folder):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor, PreTrainedTokenizerFast
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    specials = ["<start_of_image>", "<image_soft_token>", "<end_of_image>"]
    base = build_tiny_tokenizer()
    base.add_special_tokens({"additional_special_tokens": specials})
    tok = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer, bos_token="<s>", eos_token="<|im_end|>", pad_token="<pad>",
                                  unk_token="<unk>", extra_special_tokens=dict(zip(("boi_token", "image_token", "eoi_token"), specials)))  # fmt: skip
    template = ("{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' }}{% for part in message['content'] %}"
                "{% if part['type'] == 'image' %}{{ '<start_of_image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
                "{% endfor %}{{ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")
    proc = Gemma3Processor(image_processor=Gemma3ImageProcessorPil(size={"height": 28, "width": 28}), tokenizer=tok,
                           chat_template=template, image_seq_length=4)  # fmt: skip
    ids = tok.convert_tokens_to_ids(specials)
    text = dict(TEXT, vocab_size=len(tok), head_dim=16, sliding_window=256, pad_token_id=0, eos_token_id=2, bos_token_id=1)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=7)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, boi_token_index=ids[0],
                          image_token_index=ids[1], eoi_token_index=ids[2])  # fmt: skip
    return Gemma3ForConditionalGeneration(config), proc


@pytest.mark.parametrize("family", ["qwen2_5_vl", "idefics3", "smolvlm", "gemma3"])
def test_a_saved_family_folder_loads_and_the_engine_matches_the_learner(tmp_path, family):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model, processor = globals()[family](tmp_path)
    model.save_pretrained(tmp_path / family)
    processor.save_pretrained(tmp_path / family)
    loaded, tok = load(str(tmp_path / family))
    assert loaded.config.model_type == family and isinstance(tok, VisionTokenizer)
    img = Image.new("RGB", (60, 40), (200, 10, 10))
    chats = [[{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": "What?"}]}],
             [{"role": "user", "content": [{"type": "text", "text": "x"}]}]]  # fmt: skip
    prompts = [apply_chat(tok, c) for c in chats]
    assert prompts[0].vision is not None and prompts[1].vision is None
    gen = TorchEngine(loaded, tok, dtype="fp32").generate(prompts, 3, SamplingParams(max_new_tokens=8, seed=1))
    batch = Rollouts.from_generation(gen, group=gen.prompt_index, items=[{"id": int(i)} for i in gen.prompt_index])
    logp, _ = completion_logprobs(loaded, batch.prompt_ids, batch.completion_ids, batch.completion_mask, vision=batch.vision)
    assert ((logp - batch.behaviour_logprobs).abs() * batch.completion_mask).max() < 1e-5
