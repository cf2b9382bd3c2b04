"""Atomic checkpoints in TRL's layout: everything a run needs to continue exactly as if never stopped.

A checkpoint is a folder RUN_DIR/checkpoint-N/ (N = the step), laid out as a `transformers` /
TRL trainer writes one, so their tools find it (`transformers.trainer_utils.get_last_checkpoint`):

    model.safetensors + config.json   the policy, `save_pretrained` (LoRA: adapter_model.safetensors +
                                      adapter_config.json, as peft writes them), and the tokenizer
    optimizer.pt, scheduler.pt        the optimizer and LR-schedule state dicts
    rng_state.pth                     python, numpy and torch RNG states (TRL's keys)
    trainer_state.json                `TrainerState` (global_step, max_steps, log_history with TRL's
                                      metric names; `covey.train.trl_names`)
    state.pt, meta.json               covey's own: the state of every stateful component (sampler,
                                      rollout strategy, regularizers, hooks: `state_dict()` saved with
                                      torch.save so tensors and int keys survive), the step, the resolved config

The weights are read back from the safetensors files bit for bit, so a resume continues exactly
(tests/_kill_resume.py). Checkpoints of older covey versions (RUN_DIR/checkpoints/step-NNNNNN/, one
state.pt) are still found and resumed. It is written into a temporary folder next to its final place,
fsynced, then renamed: a kill at any moment leaves either the previous checkpoint or the new one,
never half of one (an old one is renamed away before it is deleted). A checkpoint damaged afterwards
(a truncated copy, a disk error) is skipped with a warning that names the file, and the run resumes
from the newest intact one (`checkpoint.keep`); with none intact, `CheckpointDamaged` (one line,
exit 2) names each damaged file.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointDamaged", "WriteError", "checkpoint_dir", "checkpoint_step", "latest_checkpoint", "load_checkpoint",
           "load_checkpoint_meta", "load_latest_checkpoint", "load_weights", "rng_state", "save_checkpoint",
           "save_hf_weights", "saved_weights", "set_rng_state", "write_error"]  # fmt: skip

PREFIX = "checkpoint-"  # TRL / transformers: output_dir/checkpoint-<global step>
_OLD_DIR, _OLD_PREFIX = "checkpoints", "step-"  # covey before issue 37: RUN/checkpoints/step-NNNNNN
_ASIDE, _TMP, _TRASH = ".aside-", ".tmp-", ".trash-"
_NAME = re.compile(r"^(?:checkpoint-(\d+)|step-(\d+))$")
# payload entries stored in TRL's files (the rest stays in covey's state.pt)
_SPLIT = {"optimizer": "optimizer.pt", "scheduler": "scheduler.pt", "rng": "rng_state.pth"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
log = logging.getLogger("covey")
_warned: set[str] = set()  # damaged checkpoints already reported by this process


class CheckpointDamaged(ValueError):
    """A checkpoint file cannot be read (truncated, empty, not JSON / not a torch archive)."""


def rng_state() -> dict[str, Any]:
    """Every RNG a run draws from, under TRL's keys (rng_state.pth): python, numpy, cpu (torch)."""
    import numpy as np

    return {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()` (also an older covey checkpoint's {"python", "torch"})."""
    random.setstate(state["python"])
    torch.set_rng_state(state["cpu"] if "cpu" in state else state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


class WriteError(OSError):
    """Writing run state failed (disk full, read-only, quota): the message names the path."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    """Where step `step`'s checkpoint of the run in `run_dir` goes: RUN_DIR/checkpoint-<step>."""
    return Path(run_dir) / f"{PREFIX}{step}"


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a checkpoint folder from its name (checkpoint-N, an older covey's step-NNNNNN, or
    either moved aside by a re-save), None for another name."""
    m = _NAME.match(Path(path).name.removeprefix(_ASIDE))
    return None if m is None else int(m.group(1) or m.group(2))


def save_checkpoint(run_dir: str | Path, step: int, payload: dict[str, Any], meta: dict[str, Any], keep: int = 2,
                    write_more=None, files: Callable[[Path], None] | None = None) -> Path:  # fmt: skip
    """Write `payload` (tensors/state dicts, saved with torch.save; its optimizer, scheduler and rng
    entries into TRL's files) and `meta` (JSON) atomically; `files(folder)` writes more files first
    (the policy in HF format, trainer_state.json: `covey.train.trainer`); `write_more(folder)` writes
    the fsdp2 learner's shards (`covey.runtime.dcp`; then meta records `"sharded": true`, and a
    checkpoint without its shards' index counts as damaged).

    Order: write a temporary folder and fsync it; move an existing folder of the same step aside;
    rename the temporary folder into place; only then delete the aside copy and old checkpoints
    (each renamed away first). A kill at any point leaves a complete checkpoint that `latest_checkpoint` finds.
    """
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(root, step)
    tmp = root / f"{_TMP}{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        if files is not None:
            files(tmp)
        if write_more is not None:
            write_more(tmp)
            meta = {**meta, "sharded": True}
        rest = dict(payload)
        for key, name in _SPLIT.items():
            if key in rest:
                obj = rest.pop(key)
                _write(tmp / name, lambda f, obj=obj: torch.save(obj, f))
        _write(tmp / "state.pt", lambda f: torch.save(rest, f))
        _write(tmp / "meta.json", lambda f: f.write(json.dumps({"step": step, **meta}, indent=1, default=str).encode()))
        for child in tmp.iterdir():  # files written by `files` / `write_more` (save_pretrained does not fsync)
            if child.is_file():
                _fsync(child)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    aside = root / f"{_ASIDE}{final.name}"
    if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a periodic save)
        _remove(aside)
        os.rename(final, aside)
    os.rename(tmp, final)
    _fsync(root)
    _remove(aside)
    _settle_asides(root)
    complete = _complete(root)
    for old in complete[:-keep]:
        _remove(old)
    # Leftovers of a kill (we hold the run's lock, so no other writer): temp folders, renamed-away
    # folders, and older-layout step folders half deleted by a pruning that was cut short.
    old_root = root / _OLD_DIR
    stale = [*root.glob(f"{_TMP}{PREFIX}*"), *root.glob(f"{_TRASH}*"), *old_root.glob(f"{_TMP}*"),
             *(set(old_root.glob(f"{_OLD_PREFIX}*")) - set(complete))]  # fmt: skip
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    if old_root.is_dir() and not any(old_root.iterdir()):
        old_root.rmdir()
    return final


def _remove(path: Path) -> None:
    """Delete a checkpoint folder so that no half-deleted copy keeps a checkpoint's name: rename, then delete."""
    if not path.exists():
        return
    trash = path.parent / f"{_TRASH}{path.name}-{os.getpid()}"
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _write(path: Path, write) -> None:
    """Write one file and fsync it; a failed write becomes a `WriteError` naming the path."""
    try:
        with open(path, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError("... iostream error")
        raise write_error(path, e) from None


def write_error(path: Path, e: BaseException) -> WriteError:
    """A `WriteError` for a failed write of `path`: "no space left on device" when that is the cause."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return WriteError(errno.ENOSPC, f"no space left on device while writing {path}")
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = -1
    if 0 <= free < 64 << 20:
        return WriteError(errno.ENOSPC, f"no space left on device while writing {path} ({free} bytes free)")
    return WriteError(getattr(e, "errno", None) or errno.EIO, f"could not write {path}: {e}")


def save_hf_weights(model: torch.nn.Module, tokenizer, folder: Path) -> None:
    """The policy as `save_pretrained` writes it into `folder` (a peft model: its adapter only, with a
    portable base-model name; `covey.train.export`), and the tokenizer."""
    from covey.train.export import portable_base, quiet_progress

    try:
        with quiet_progress():
            model.save_pretrained(folder, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
    except OSError as e:
        raise write_error(folder / "model.safetensors", e) from None
    portable_base(folder / "adapter_config.json")


def _complete(root: Path) -> list[Path]:
    """Complete checkpoint folders of the run in `root` (state.pt + meta.json), both layouts, oldest first."""
    found = [p for p in root.glob(f"{PREFIX}*") if checkpoint_step(p) is not None and _is_complete(p)]
    found += [p for p in (root / _OLD_DIR).glob(f"{_OLD_PREFIX}*") if checkpoint_step(p) is not None and _is_complete(p)]
    return sorted(found, key=lambda p: (checkpoint_step(p), p.name.startswith(PREFIX)))


def _asides(root: Path) -> list[Path]:
    found = [*root.glob(f"{_ASIDE}{PREFIX}*"), *(root / _OLD_DIR).glob(f"{_ASIDE}{_OLD_PREFIX}*")]
    return [p for p in found if checkpoint_step(p) is not None and _is_complete(p)]


def latest_checkpoint(run_dir: str | Path, *, skip: dict[Path, str] | None = None) -> Path | None:
    """The newest complete, intact checkpoint, or None when there is no complete one. Temporary folders
    are ignored; an old copy moved aside by a re-save that was killed before the new copy landed counts
    as its step. A damaged checkpoint (`damage`) or one in `skip` (path -> what is wrong) is passed
    over with a warning naming the file; if every complete one is damaged, `CheckpointDamaged` names
    them all. Read-only (a reader may look while the run is writing); the next save settles leftovers."""
    root = Path(run_dir)
    found = _complete(root)
    steps = {checkpoint_step(p) for p in found}
    found += [a for a in _asides(root) if checkpoint_step(a) not in steps]
    problems = []
    for path in sorted(found, key=lambda p: (checkpoint_step(p), p.name.startswith(PREFIX)), reverse=True):
        problem = (skip or {}).get(path) or damage(path)
        if problem is None:
            for older in problems:
                _warn_once(f"{older}: resuming from the older checkpoint {path.name} instead")
            return path
        problems.append(problem)
    if problems:
        raise CheckpointDamaged(f"no intact checkpoint in {root}: " + "; ".join(problems))
    return None


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def damage(path: Path) -> str | None:
    """What makes the checkpoint folder `path` unreadable, naming the file, or None when it looks
    whole: meta.json must be a JSON object with an integer step, every torch file a whole archive (a
    zip whose directory sits at its very end, so any truncation or an empty file shows), every
    safetensors file as long as its header says. It reads only headers and directories;
    `load_checkpoint` reports damage inside the tensors."""
    meta = path / "meta.json"
    try:
        data = json.loads(meta.read_bytes())
    except (OSError, ValueError) as e:
        return f"{meta} is damaged ({type(e).__name__}: {e})"
    if not isinstance(data, dict) or type(data.get("step")) is not int:
        return f"{meta} is damaged (not a checkpoint's meta: no integer 'step')"
    if data.get("sharded") and not (path / "learner" / ".metadata").is_file():
        return f"{path / 'learner'} is damaged (the sharded learner state has no .metadata index)"
    for name in ("state.pt", *_SPLIT.values()):
        problem = _torch_file_damage(path / name, required=name == "state.pt")
        if problem:
            return problem
    for weights in sorted(path.glob("*.safetensors")):
        problem = _safetensors_damage(weights)
        if problem:
            return problem
    return None


def _torch_file_damage(file: Path, required: bool) -> str | None:
    if not required and not file.exists():
        return None
    try:
        with zipfile.ZipFile(file) as z:
            z.namelist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
        size = file.stat().st_size if file.exists() else 0
        return f"{file} is damaged ({size} bytes: truncated or not a torch archive: {e})"
    return None


def _safetensors_damage(file: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header with each tensor's byte offsets, then the data."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        return f"{file} is damaged (not a whole safetensors file: {type(e).__name__}: {e})"
    if size != 8 + n + end:
        return f"{file} is damaged ({size} bytes, its header says {8 + n + end}: truncated)"
    return None


def load_latest_checkpoint(run_dir: str | Path, map_location=None) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:
    """(path, payload, meta) of the newest checkpoint that loads, or None when there is none; a
    checkpoint whose tensors fail to load is passed over like a damaged one (with a warning)."""
    skip: dict[Path, str] = {}
    while (path := latest_checkpoint(run_dir, skip=skip)) is not None:
        try:
            return path, *load_checkpoint(path, map_location)
        except CheckpointDamaged as e:
            skip[path] = str(e)
    return None


def _settle_asides(root: Path) -> None:
    """Old copies moved aside by an interrupted re-save (called by the writer, which holds the lock):
    put back where the new copy never landed, deleted where it did (or when incomplete)."""
    for aside in [*root.glob(f"{_ASIDE}{PREFIX}*"), *(root / _OLD_DIR).glob(f"{_ASIDE}{_OLD_PREFIX}*")]:
        name = aside.parent / aside.name.removeprefix(_ASIDE)
        if _is_complete(aside) and not name.exists():  # killed between moving it aside and renaming the new one in
            os.rename(aside, name)
        elif _is_complete(name) or not _is_complete(aside):  # killed after the new copy landed
            shutil.rmtree(aside, ignore_errors=True)


def _is_complete(path: Path) -> bool:
    return (path / "state.pt").is_file() and (path / "meta.json").is_file()


def load_checkpoint(path: str | Path, map_location=None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(payload, meta) of a checkpoint folder; tensors go to `map_location` (default: where saved).
    The payload holds covey's state.pt and TRL's optimizer / scheduler / rng files under "optimizer",
    "scheduler", "rng"; the weights stay on disk (`load_weights` reads them). An unreadable file raises
    `CheckpointDamaged` naming it."""
    path = Path(path)
    meta = load_checkpoint_meta(path)
    problem = damage(path)
    if problem is not None:
        raise CheckpointDamaged(problem)
    payload = _torch_load(path / "state.pt", map_location)
    for key, name in _SPLIT.items():
        if (path / name).is_file():
            payload[key] = _torch_load(path / name, map_location)
    return payload, meta


def _torch_load(file: Path, map_location) -> Any:
    try:
        obj = torch.load(file, weights_only=False, map_location=map_location)
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, AttributeError, ImportError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise CheckpointDamaged(f"{file} is damaged ({type(e).__name__}: {first})") from None
    if file.name == "state.pt" and not isinstance(obj, dict):
        raise CheckpointDamaged(f"{file} is damaged (not a checkpoint's state: {type(obj).__name__})")
    return obj


def load_weights(model: torch.nn.Module, path: str | Path, payload: dict[str, Any]) -> None:
    """The checkpoint's trainable weights into `model` (unsharded): from its HF files (model.safetensors,
    sharded with an index, or a peft adapter_model.safetensors), an older checkpoint's `payload["model"]`,
    or the fsdp2 learner's shards under <path>/learner (`covey.runtime.dcp`, read in this one process)."""
    path = Path(path)
    if "model" in payload:
        state = payload["model"]
    elif any((path / f).is_file() for f in WEIGHT_FILES):
        state = _hf_state(model, path)
    else:
        from covey.runtime.dcp import has_shards, load_weights as load_sharded

        if not has_shards(path):
            raise CheckpointDamaged(f"{path} holds no weights (no model.safetensors, no model entry in state.pt and no "
                                    "learner/ shards)")  # fmt: skip
        load_sharded(model, path)
        return
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = trainable - set(state)
    if missing:
        raise ValueError(f"checkpoint {path} lacks weights {sorted(missing)[:3]}...: was it written by another model?")
    model.load_state_dict(state, strict=False)


def saved_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights a checkpoint folder holds, as saved: model.safetensors (and its shards) or a peft
    adapter_model.safetensors under the file's names, an older checkpoint's state.pt "model" entry;
    {} for the fsdp2 learner's shards."""
    from safetensors.torch import load_file

    path = Path(path)
    if (path / "adapter_model.safetensors").is_file():
        return load_file(path / "adapter_model.safetensors")
    index = path / "model.safetensors.index.json"
    if index.is_file() or (path / "model.safetensors").is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
        return {k: v for shard in shards for k, v in load_file(path / shard).items()}
    return dict(_torch_load(path / "state.pt", "cpu").get("model", {}))


def _hf_state(model: torch.nn.Module, path: Path) -> dict[str, torch.Tensor]:
    """The state dict in `model`'s own parameter names from the checkpoint's safetensors files."""
    from safetensors.torch import load_file

    if (path / "adapter_model.safetensors").is_file():
        if not hasattr(model, "peft_config"):
            raise ValueError(f"checkpoint {path} holds a LoRA adapter but the model has no adapter (model.lora)")
        from peft.utils import get_peft_model_state_dict

        saved = load_file(path / "adapter_model.safetensors")
        live = get_peft_model_state_dict(model)  # peft's saved names -> views of the model's parameters
        by_storage = {p.data_ptr(): n for n, p in model.named_parameters()}
        names = {k: by_storage.get(v.data_ptr()) for k, v in live.items()}
        if set(saved) != set(live) or None in names.values():
            diff = sorted(set(saved) ^ set(live)) or [k for k, n in names.items() if n is None]
            raise ValueError(f"checkpoint {path}: the adapter's tensors do not match the model's LoRA layers (e.g. {diff[:2]})")
        return {names[k]: v for k, v in saved.items()}
    return saved_weights(path)


def load_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """meta.json of a checkpoint folder (step, config, dtypes, ...), without loading its tensors."""
    path = Path(path)
    if not (path / "state.pt").is_file() or not (path / "meta.json").is_file():
        raise FileNotFoundError(f"{path} is not a complete covey checkpoint (state.pt + meta.json)")
    try:
        meta = json.loads((path / "meta.json").read_bytes())
    except ValueError as e:
        raise CheckpointDamaged(f"{path / 'meta.json'} is damaged ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or type(meta.get("step")) is not int:
        raise CheckpointDamaged(f"{path / 'meta.json'} is damaged (not a checkpoint's meta: no integer 'step')")
    return meta


def _fsync(path: Path) -> None:
    """fsync a file or a folder (a folder's entries: a rename into it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
