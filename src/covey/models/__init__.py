"""covey.models: model + tokenizer loading, built-in aliases, tiny test models, chat prompts.

`load(name)` -> (model, tokenizer) for an alias (`smollm2-135m-instruct`, `tiny-llama`, `tiny-qwen2`),
a local HF folder or a hub id; `prepare(alias)` converts a shipped GGUF once into covey's cache;
`apply_chat(tokenizer, prompt)` gives the prompt's token ids. Generation lives in `covey.engine`.
"""

from covey.models.chat import apply_chat
from covey.models.convert import cache_root, prepare, verify_folder
from covey.models.loading import ALIASES, load, resolve_dtype
from covey.models.tiny import build_tiny, build_tiny_tokenizer

__all__ = [
    "ALIASES",
    "apply_chat",
    "build_tiny",
    "build_tiny_tokenizer",
    "cache_root",
    "load",
    "prepare",
    "resolve_dtype",
    "verify_folder",
]
