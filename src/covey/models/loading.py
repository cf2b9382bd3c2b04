"""`load(name_or_path)`: one call that gives a causal LM and its tokenizer.

Accepts a built-in alias (`ALIASES`), a local HF folder, or a hub id. Hub ids are looked up in the
local HF cache first (`local_files_only=True`), so they work offline once their files are cached;
only if that fails is the hub asked (which fails cleanly without network).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from covey.models.convert import ALIAS_SOURCES, prepare
from covey.models.tiny import build_tiny

__all__ = ["ALIASES", "load", "resolve_dtype"]

ALIASES = ("smollm2-135m-instruct", "tiny-llama", "tiny-qwen2")
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A torch dtype from a name like "float32", "fp32", "bf16" (or a torch.dtype itself)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def load(
    name_or_path: str | os.PathLike,
    *,
    dtype: str | torch.dtype = "float32",
    cache_dir: str | os.PathLike | None = None,
    seed: int = 0,
    **overrides,
):
    """Load (model, tokenizer). The model is in eval mode with weights in `dtype`.

    name_or_path: an alias in `ALIASES`, a local folder with config.json + weights, or a hub id.
    cache_dir:    covey's cache for converted aliases (default $COVEY_CACHE or ~/.cache/covey).
    seed:         weight seed of the tiny random models (ignored otherwise).
    overrides:    config fields of the tiny models (e.g. hidden_size=64); an error for other models.
    """
    torch_dtype = resolve_dtype(dtype)
    name = str(name_or_path)
    if name in ("tiny-llama", "tiny-qwen2"):
        return build_tiny(name, seed=seed, dtype=torch_dtype, **overrides)
    if overrides:
        raise ValueError(f"config overrides {sorted(overrides)} apply only to the tiny models, not {name!r}")
    if name in ALIAS_SOURCES:
        return _from_pretrained(prepare(name, cache_dir=cache_dir), torch_dtype, local_only=True)
    if Path(name).is_dir():
        return _from_pretrained(Path(name), torch_dtype, local_only=True)
    if Path(name).exists() or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path {name!r} is not a folder with a saved model; aliases are {list(ALIASES)}")
    try:
        return _from_pretrained(name, torch_dtype, local_only=True)
    except OSError:
        if not hub_reachable():
            raise FileNotFoundError(
                f"unknown model {name!r}: not an alias ({', '.join(ALIASES)}), not a local folder, not in the local "
                "HF cache, and the hub is not reachable from here"
            ) from None
        try:
            return _from_pretrained(name, torch_dtype, local_only=False)
        except OSError as err:
            raise FileNotFoundError(f"could not load model {name!r} from the hub: {err}") from None


def hub_reachable(timeout: float = 1.0) -> bool:
    """True when the HF hub answers a TCP connection within `timeout` s (False when HF_HUB_OFFLINE is set).
    One quick probe instead of the hub client's retries, so an unknown name fails in about a second."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_pretrained(source, torch_dtype: torch.dtype, *, local_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, local_files_only=local_only)
    return model.eval(), tokenizer
