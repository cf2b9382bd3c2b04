"""Tiny random test models: `tiny-llama` and `tiny-qwen2`, with a character-level tokenizer.

Both are built in well under a second from a seed (no files, no network), so tests and the
trainer's tests can run a real transformers model end to end. The tokenizer is character-level
(printable ASCII, newline, tab) with byte fallback (any other character becomes its UTF-8 bytes, so
encoding is lossless), plus the special tokens below and a ChatML chat template without a system
prompt. Character-level tokens make arithmetic easy to learn from a short SFT warm start.

This module covers building; `covey.models.loading.load` is the public entry point.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

__all__ = ["TINY_DEFAULTS", "build_tiny", "build_tiny_tokenizer"]

PAD, BOS, EOS, UNK, IM_START = "<pad>", "<s>", "<|im_end|>", "<unk>", "<|im_start|>"
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
_ARCHS = {
    "tiny-llama": (LlamaConfig, LlamaForCausalLM, {"tie_word_embeddings": False}),
    "tiny-qwen2": (Qwen2Config, Qwen2ForCausalLM, {"tie_word_embeddings": True}),
}


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer shared by the tiny models (vocab 358: 5 special, 97 chars, 256 bytes)."""
    vocab = {tok: i for i, tok in enumerate(_SPECIALS + _CHARS + _BYTES)}
    # A BPE model with no merges and no pre-tokenizer splits text into single characters.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, byte_fallback=True))
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    core.add_special_tokens(_SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        chat_template=CHAT_TEMPLATE,
        model_max_length=TINY_DEFAULTS["max_position_embeddings"],
    )


def build_tiny(name: str, *, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """Build `tiny-llama` or `tiny-qwen2` with weights drawn from `seed` (same seed -> same weights).

    `overrides` replace config fields (e.g. hidden_size=64, num_hidden_layers=2).
    Returns (model in eval mode, tokenizer).
    """
    if name not in _ARCHS:
        raise ValueError(f"unknown tiny model {name!r}; choose one of {sorted(_ARCHS)}")
    config_cls, model_cls, arch_kw = _ARCHS[name]
    tokenizer = build_tiny_tokenizer()
    fields = {**TINY_DEFAULTS, **arch_kw, **overrides}
    config = config_cls(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **fields,
    )
    # fork_rng: a seeded build must not disturb (or depend on) the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(dtype).eval(), tokenizer
