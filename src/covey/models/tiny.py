"""Tiny random test models: `tiny-llama`, `tiny-qwen2` and `tiny-llada`, with a character-level tokenizer.

`tiny-llada` is the masked-diffusion test model (docs/diffusion.md): the tiny-llama recipe with
`config.is_causal = False` (transformers then builds bidirectional attention masks) and one more
special token, the mask token `<|mask|>` (id 358, vocabulary 359), like LLaDA's `[MASK]`.

Both are built in well under a second from a seed (no files, no network), so tests and the
trainer's tests can run a real transformers model end to end. The tokenizer is character-level
(printable ASCII, newline, tab) with byte fallback (any other character becomes its UTF-8 bytes, so
encoding is lossless), plus the special tokens below and a ChatML chat template without a system
prompt. Character-level tokens make arithmetic easy to learn from a short SFT warm start.

This module covers building; `covey.models.loading.load` is the public entry point.
"""

from __future__ import annotations

import torch

__all__ = ["TINY_DEFAULTS", "build_tiny", "build_tiny_tokenizer", "tiny_config"]

PAD, BOS, EOS, UNK, IM_START = "<pad>", "<s>", "<|im_end|>", "<unk>", "<|im_start|>"
MASK = "<|mask|>"  # tiny-llada only: id 358, after the byte tokens
_SPECIALS = [PAD, BOS, EOS, UNK, IM_START]  # ids 0..4, in this order
_CHARS = ["\n", "\t"] + [chr(c) for c in range(32, 127)]
_BYTES = [f"<0x{b:02X}>" for b in range(256)]

# ChatML like SmolLM2-Instruct, minus its default system prompt (prompts stay short at one char a token).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# ~1.6M parameters each: big enough to learn small arithmetic, small enough for fast CPU tests.
TINY_DEFAULTS = {
    "hidden_size": 192,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,  # grouped-query attention, like SmolLM2 and Qwen2
    "max_position_embeddings": 1024,
}
_ARCHS = {  # name -> (transformers config class, model class, the fields that differ)
    "tiny-llama": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": False}),
    "tiny-qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    "tiny-llada": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": False, "is_causal": False}),
}
_MODEL_TYPES = {"LlamaConfig": "llama", "Qwen2Config": "qwen2"}


def tiny_config(name: str) -> dict:
    """The config.json fields of tiny model `name` (what `build_tiny` builds, without building it or
    importing transformers): model_type, architectures, vocab_size, the `TINY_DEFAULTS` and the
    model's own fields."""
    if name not in _ARCHS:
        raise ValueError(f"unknown tiny model {name!r}; choose one of {sorted(_ARCHS)}")
    config_cls, model_cls, arch_kw = _ARCHS[name]
    vocab = len(_SPECIALS) + len(_CHARS) + len(_BYTES) + (name == "tiny-llada")  # the mask token
    return {"model_type": _MODEL_TYPES[config_cls], "architectures": [model_cls], "vocab_size": vocab,
            **TINY_DEFAULTS, **arch_kw}  # fmt: skip


def build_tiny_tokenizer(mask: bool = False) -> PreTrainedTokenizerFast:
    """The character-level tokenizer shared by the tiny models (vocab 358: 5 special, 97 chars, 256 bytes);
    `mask=True` adds the mask token `<|mask|>` as id 358 (tiny-llada)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    extra = [MASK] if mask else []
    vocab = {tok: i for i, tok in enumerate(_SPECIALS + _CHARS + _BYTES + extra)}
    # A BPE model with no merges and no pre-tokenizer splits text into single characters.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, byte_fallback=True))
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    core.add_special_tokens(_SPECIALS + extra)
    return PreTrainedTokenizerFast(
        **({"mask_token": MASK} if mask else {}),
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        chat_template=CHAT_TEMPLATE,
        model_max_length=TINY_DEFAULTS["max_position_embeddings"],
    )


def build_tiny(name: str, *, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """Build `tiny-llama`, `tiny-qwen2` or `tiny-llada` with weights drawn from `seed` (same seed -> same weights).

    `overrides` replace config fields (e.g. hidden_size=64, num_hidden_layers=2).
    Returns (model in eval mode, tokenizer).
    """
    import transformers

    if name not in _ARCHS:
        raise ValueError(f"unknown tiny model {name!r}; choose one of {sorted(_ARCHS)}")
    config_name, model_name, arch_kw = _ARCHS[name]
    config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
    tokenizer = build_tiny_tokenizer(mask=name == "tiny-llada")
    fields = {**TINY_DEFAULTS, **arch_kw, **overrides}
    config = config_cls(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **({"mask_token_id": tokenizer.mask_token_id} if name == "tiny-llada" else {}),
        **fields,
    )
    # fork_rng: a seeded build must not disturb (or depend on) the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(dtype).eval(), tokenizer
