"""covey.models: model + tokenizer loading, built-in aliases, tiny test models, chat prompts.

`load(name)` -> (model, tokenizer) for an alias (`smollm2-135m-instruct`, `tiny-llama`, `tiny-qwen2`),
a local HF folder or a hub id; `prepare(alias)` converts a shipped GGUF once into covey's cache;
`apply_chat(tokenizer, prompt)` gives the prompt's token ids. Generation lives in `covey.engine`.
"""

from importlib import import_module

_HOME = {
    "apply_chat": "chat",
    "cache_root": "convert",
    "portable_model_name": "convert",
    "prepare": "convert",
    "verify_folder": "convert",
    "ALIASES": "loading",
    "check_name": "loading",
    "load": "loading",
    "resolve_dtype": "loading",
    "build_tiny": "tiny",
    "build_tiny_tokenizer": "tiny",
}


def __getattr__(name: str):
    """Submodules load on first use: `covey config show` checks a model name without importing
    transformers (seconds on a busy machine)."""
    if name in _HOME:
        return getattr(import_module(f"covey.models.{_HOME[name]}"), name)
    raise AttributeError(f"module 'covey.models' has no attribute {name!r}")

__all__ = [
    "ALIASES",
    "apply_chat",
    "build_tiny",
    "build_tiny_tokenizer",
    "cache_root",
    "check_name",
    "load",
    "portable_model_name",
    "prepare",
    "resolve_dtype",
    "verify_folder",
]
