"""`load(name_or_path)`: one call that gives a causal LM and its tokenizer.

Accepts a built-in alias (`ALIASES`), a local HF folder, or a hub id. Hub ids are looked up in the
local HF cache first (a file-system look-up, then the cached snapshot folder is loaded: no network),
so they work offline once their files are cached. The hub id of a built-in alias
(`HuggingFaceTB/SmolLM2-135M-Instruct`) that is neither cached nor reachable loads that alias (with a
warning: the alias is the model's Q4_1 GGUF, dequantised). Only an id that is not cached goes to the hub, after
one quick connectivity probe: an unknown name fails in about a second, not after the hub client's
retries (and at once with HF_HUB_OFFLINE=1). `check_name` runs the same resolution without loading.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from covey.models.convert import ALIAS_SOURCES, prepare

__all__ = ["ALIASES", "BUNDLED_CONFIGS", "bundled_config", "check_name", "hub_alias", "hub_reachable", "load", "model_config",
           "resolve_dtype"]

# alias -> the config.json fields `model_config` gives for it (what `load` builds; no import of transformers)
ALIAS_CONFIGS = {
    "smollm2-135m-instruct": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    "tiny-llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    "tiny-qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
    "tiny-llada": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "is_causal": False},
    "tiny-qwen2-vl": {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"]},
}
ALIASES = tuple(ALIAS_CONFIGS)
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
    trust_remote_code: bool = False,
    **overrides,
):
    """Load (model, tokenizer). The model is in eval mode with weights in `dtype`.

    name_or_path: an alias in `ALIASES`, a local folder with config.json + weights, or a hub id. A
                  vision-language folder (docs/vlm.md) gives (`AutoModelForImageTextToText` model, a
                  `covey.models.vision.VisionTokenizer` holding its `AutoProcessor`).
    cache_dir:    covey's cache for converted aliases (default $COVEY_CACHE or ~/.cache/covey).
    seed:         weight seed of the tiny random models (ignored otherwise).
    trust_remote_code: run the model code a folder ships (LLaDA, Dream: `model.trust_remote_code`).
    overrides:    config fields of the tiny models (e.g. hidden_size=64); an error for other models.
    """
    torch_dtype = resolve_dtype(dtype)
    name = str(name_or_path)
    if name in ("tiny-llama", "tiny-qwen2", "tiny-llada"):
        from covey.models.tiny import build_tiny  # transformers: imported only to build a model

        return build_tiny(name, seed=seed, dtype=torch_dtype, **overrides)
    if name == "tiny-qwen2-vl":
        from covey.models.tiny_vision import build_tiny_vision

        return build_tiny_vision(seed=seed, dtype=torch_dtype, **overrides)
    if overrides:
        raise ValueError(f"config overrides {sorted(overrides)} apply only to the tiny models, not {name!r}")
    if name in ALIAS_SOURCES:
        return _from_pretrained(prepare(name, cache_dir=cache_dir), torch_dtype, local_only=True)
    if Path(name).expanduser().is_dir():
        return _from_pretrained(Path(name).expanduser(), torch_dtype, local_only=True, trust_remote_code=trust_remote_code)
    snapshot = _resolve_hub_id(name)
    if isinstance(snapshot, str):  # the hub id of a built-in alias, neither cached nor reachable
        return _from_pretrained(prepare(snapshot, cache_dir=cache_dir), torch_dtype, local_only=True)
    if snapshot is not None:
        try:
            return _from_pretrained(snapshot, torch_dtype, local_only=True)
        except OSError as err:
            if not hub_reachable():
                raise FileNotFoundError(f"model {name!r} is only partly in the local HF cache ({snapshot}) and the hub "
                                        f"is not reachable from here: {err}") from None  # fmt: skip
    try:
        return _from_pretrained(name, torch_dtype, local_only=False)
    except OSError as err:
        raise FileNotFoundError(f"could not load model {name!r} from the hub: {err}") from None


def check_name(name: str) -> None:
    """Raise (as `load` would, with the same message) when `name` is not an alias, a local model folder,
    a hub id in the local HF cache, or (hub reachable) a hub id to download. Loads nothing."""
    if name in ALIASES or name in ALIAS_SOURCES or Path(name).expanduser().is_dir():
        return
    _resolve_hub_id(name)


def model_config(name: str) -> dict | None:
    """The config.json of model `name` as a dict, read without loading weights or importing
    transformers: a tiny model's fields (`covey.models.tiny.tiny_config`), a converted alias's folder
    once prepared (else the alias's fields, `ALIAS_CONFIGS`, with its hub model's bundled config), a
    local folder's config.json, or the cached config.json of a hub id, else the bundled copy of a few
    hub models' config.json (`BUNDLED_CONFIGS`: for planning, `covey plan`). None when it cannot be
    read offline (a hub id that is neither cached nor bundled, a folder without config.json:
    `check_name` and `load` report those)."""
    import json

    from covey.models.convert import ALIAS_HUB_IDS, cache_root

    if name in ("tiny-llama", "tiny-qwen2", "tiny-llada"):
        from covey.models.tiny import tiny_config

        return {**ALIAS_CONFIGS[name], **tiny_config(name)}
    if name == "tiny-qwen2-vl":
        from covey.models.tiny_vision import tiny_vision_config

        return tiny_vision_config()
    if name in ALIAS_CONFIGS:
        prepared = cache_root() / "models" / name / "config.json"
        config = _read_json(prepared) if prepared.is_file() else bundled_config(ALIAS_HUB_IDS.get(name, ""))
        return {**(config or {}), **ALIAS_CONFIGS[name]}
    folder = Path(name).expanduser()
    if folder.is_dir():
        path = folder / "config.json"
    elif folder.exists() or name.startswith((".", "/", "~")):
        return None
    else:
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(name, "config.json")
        except ValueError:  # not a valid hub id
            return None
        if not isinstance(cached, str):
            return bundled_config(name)
        path = Path(cached)
    return _read_json(path)


BUNDLED_CONFIGS = Path(__file__).with_name("configs")
"""Hand-written copies of a few hub models' config.json (the published values of the fields a memory
plan reads), named `<org>--<name>.json`: Qwen2.5 0.5B/1.5B/7B/32B-Instruct and SmolLM2-135M-Instruct."""


def bundled_config(hub_id: str) -> dict | None:
    """The bundled config.json of hub model `hub_id` (`BUNDLED_CONFIGS`), or None."""
    path = BUNDLED_CONFIGS / f"{hub_id.replace('/', '--')}.json"
    return _read_json(path) if "/" in hub_id and path.is_file() else None


def _read_json(path: Path) -> dict | None:
    import json

    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


_ALIAS_WARNED: set[str] = set()


def hub_alias(name: str) -> str | None:
    """The built-in alias that is hub model `name` (`ALIAS_HUB_IDS`; hub ids compare case-insensitively,
    as on the hub), or None. `HuggingFaceTB/SmolLM2-135M-Instruct` -> `smollm2-135m-instruct`."""
    from covey.models.convert import ALIAS_HUB_IDS

    return next((alias for alias, hub in ALIAS_HUB_IDS.items() if hub.lower() == name.lower()), None)


def _resolve_hub_id(name: str) -> Path | str | None:
    """The cached snapshot folder of hub id `name`, None when it is not cached but the hub is reachable
    (download it), the built-in alias that is this model when it is neither (offline: a warning says
    so once), or FileNotFoundError naming the aliases."""
    if Path(name).expanduser().exists() or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path {name!r} is not a folder with a saved model; aliases are {list(ALIASES)}")
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError as e:  # not a valid repo id
        raise FileNotFoundError(f"unknown model {name!r}: not an alias ({', '.join(ALIASES)}), not a local folder, "
                                f"and not a valid hub id ({e})") from None  # fmt: skip
    if isinstance(cached, str):
        return Path(cached).parent
    if not hub_reachable():
        alias = hub_alias(name)
        if alias is not None:
            if name not in _ALIAS_WARNED:
                _ALIAS_WARNED.add(name)
                import logging

                logging.getLogger("covey").warning(
                    "model %s is not in the local HF cache and the hub is not reachable: using the built-in alias %s, the "
                    "same model shipped offline as its Q4_1 GGUF, dequantised (weights within that quantisation of the "
                    "hub's)", name, alias)  # fmt: skip
            return alias
        raise FileNotFoundError(
            f"unknown model {name!r}: not an alias ({', '.join(ALIASES)}), not a local folder, not in the local "
            "HF cache, and the hub is not reachable from here"
        )
    return None


def hub_reachable(timeout: float = 1.0) -> bool:
    """True when the HF hub answers a TCP connection within `timeout` s (False when HF_HUB_OFFLINE is set).
    One quick probe instead of the hub client's retries, so an unknown name fails in about a second."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    import threading

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    answer: list[bool] = []

    def probe() -> None:  # in a thread: name resolution ignores socket timeouts and can hang
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    worker = threading.Thread(target=probe, daemon=True, name="covey-hub-probe")
    worker.start()
    worker.join(timeout)
    return bool(answer and answer[0])


def _from_pretrained(source, torch_dtype: torch.dtype, *, local_only: bool, trust_remote_code: bool = False):
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    remote = {"trust_remote_code": True} if trust_remote_code else {}
    from covey.models.vision import is_vision_config

    if is_vision_config(_read_json(Path(source) / "config.json") if Path(source).is_dir() else None):
        from covey.models.vision_loading import load_vision

        return load_vision(source, torch_dtype, local_only=local_only, **remote)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only, **remote)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, local_files_only=local_only, **remote)
    except ValueError:
        if not trust_remote_code:
            raise
        # Dream's remote code maps only AutoModel (a masked-diffusion model with an LM head)
        model = AutoModel.from_pretrained(source, dtype=torch_dtype, local_files_only=local_only, **remote)
    return model.eval(), tokenizer
