"""`tiny-qwen2-vl`: the tiny random vision-language test model (docs/vlm.md), built from a config in well
under a second (no files, no network), like `tiny-llama`.

A 2-layer Qwen2-VL language tower (hidden 64, 4 query / 2 KV heads, M-RoPE sections [2, 3, 3]) with a
2-block vision tower (embed 32, 14 x 14 patches, 2 x 2 merge: one image token per 28 x 28 pixels),
about 0.2M parameters; covey's character tokenizer (`covey.models.tiny`) with Qwen2-VL's four vision
tokens added (ids 358-361: <|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|>), and
Qwen2-VL's PIL image processor with a small pixel budget (`min_pixels` 28 x 28, `max_pixels` 28 x 28 x 64:
at most 64 image tokens). The chat template is the tiny models' ChatML, where a content part
{"type": "image"} renders as <|vision_start|><|image_pad|><|vision_end|> (Qwen2-VL's rendering).

The processor has no video processor (transformers' needs torchvision): covey passes video as frames
with timestamps (images), docs/vlm.md. `covey.models.vision_loading` builds the same kind of processor
for a user's Qwen2-VL / Qwen2.5-VL folder when `AutoProcessor` cannot (no torchvision).
"""

from __future__ import annotations

import torch

from covey.models.tiny import build_tiny_tokenizer

__all__ = ["TINY_VISION", "build_tiny_vision", "tiny_vision_config"]

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
CHAT_TEMPLATE_VL = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_VISION = {
    "text": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 1024,
             "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}},
    "vision": {"depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14,
               "spatial_merge_size": 2, "temporal_patch_size": 2},
    "min_pixels": 28 * 28,
    "max_pixels": 28 * 28 * 64,
}  # fmt: skip


def tiny_vision_config() -> dict:
    """The config.json fields of `tiny-qwen2-vl` (without building it or importing transformers)."""
    vocab = 358 + len(VISION_TOKENS)
    return {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"], "vocab_size": vocab,
            "vision_config": dict(TINY_VISION["vision"]), "text_config": dict(TINY_VISION["text"], vocab_size=vocab),
            "max_position_embeddings": TINY_VISION["text"]["max_position_embeddings"]}  # fmt: skip


def build_tiny_vision(*, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """Build `tiny-qwen2-vl` with weights drawn from `seed`; `overrides` replace language-tower config fields
    (e.g. hidden_size=32). Returns (model in eval mode, `VisionTokenizer`)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from covey.models.vision import VisionTokenizer
    from covey.models.vision_loading import ImageOnlyQwen2VLProcessor

    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    tokenizer.chat_template = CHAT_TEMPLATE_VL
    image_processor = Qwen2VLImageProcessorPil(min_pixels=TINY_VISION["min_pixels"], max_pixels=TINY_VISION["max_pixels"])
    processor = ImageOnlyQwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE_VL)
    ids = dict(zip(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"),
                   tokenizer.convert_tokens_to_ids(VISION_TOKENS)))  # fmt: skip
    text = {**TINY_VISION["text"], **overrides, "vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    config = Qwen2VLConfig(text_config=text, vision_config=dict(TINY_VISION["vision"]), **ids)
    with torch.random.fork_rng(devices=[]):  # a seeded build neither disturbs nor depends on the caller's RNG
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.to(dtype).eval(), VisionTokenizer(processor)
