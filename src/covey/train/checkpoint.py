"""Atomic checkpoints: everything a run needs to continue exactly as if never stopped.

A checkpoint is a folder RUN_DIR/checkpoints/step-NNNNNN/ holding the trainable weights (full state
dict, or only the LoRA adapter), optimizer, scheduler, every RNG state, the sampler state, the step
counter, the resolved config, and the state of every stateful component (sampler, rollout
strategy: `state_dict()` saved with torch.save so tensors and int keys survive). It is written into a temporary folder next to its final place,
fsynced, then renamed: a kill at any moment leaves either the previous checkpoint or the new one,
never half of one. A checkpoint damaged afterwards (a truncated copy, a disk error) is skipped with a
warning that names the file, and the run resumes from the newest intact one (`checkpoint.keep`);
with none intact, `CheckpointDamaged` (one line, exit 2) names each damaged file.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointDamaged", "WriteError", "latest_checkpoint", "load_checkpoint", "load_checkpoint_meta",
           "load_latest_checkpoint", "load_weights", "rng_state", "save_checkpoint", "set_rng_state", "write_error"]

_PREFIX = "step-"
_ASIDE = ".aside-"
log = logging.getLogger("covey")
_warned: set[str] = set()  # damaged checkpoints already reported by this process


class CheckpointDamaged(ValueError):
    """A checkpoint file cannot be read (truncated, empty, not JSON / not a torch archive)."""


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])


class WriteError(OSError):
    """Writing run state failed (disk full, read-only, quota): the message names the path."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def save_checkpoint(run_dir: str | Path, step: int, payload: dict[str, Any], meta: dict[str, Any], keep: int = 2,
                    write_more=None) -> Path:  # fmt: skip
    """Write `payload` (tensors/state dicts, saved with torch.save) and `meta` (JSON) atomically;
    `write_more(folder)` writes more into the temporary folder first (the fsdp2 learner's shards,
    `covey.runtime.dcp`; then meta records `"sharded": true`, and a checkpoint without its shards'
    index counts as damaged).

    Order: write a temporary folder and fsync it; move an existing folder of the same step aside;
    rename the temporary folder into place; only then delete the aside copy and old checkpoints.
    A kill at any point leaves a complete checkpoint that `latest_checkpoint` finds.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        if write_more is not None:
            write_more(tmp)
            meta = {**meta, "sharded": True}
        _write(tmp / "state.pt", lambda f: torch.save(payload, f))
        _write(tmp / "meta.json", lambda f: f.write(json.dumps({"step": step, **meta}, indent=1, default=str).encode()))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    aside = root / f"{_ASIDE}{final.name}"
    if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a periodic save)
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(final, aside)
    os.rename(tmp, final)
    _fsync_dir(root)
    shutil.rmtree(aside, ignore_errors=True)
    _settle_asides(root)
    complete = _complete(root)
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    # Leftovers of a kill (we hold the run's lock, so no other writer): temp folders, and step
    # folders half deleted by a pruning that was cut short.
    for stale in [*root.glob(".tmp-*"), *(set(root.glob(f"{_PREFIX}*")) - set(complete))]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


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


def _complete(root: Path, prefix: str = _PREFIX) -> list[Path]:
    """Complete checkpoint folders (state.pt + meta.json) named prefix + step, oldest first."""
    found = [p for p in root.glob(f"{prefix}*") if _is_complete(p)]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(run_dir: str | Path, *, skip: dict[Path, str] | None = None) -> Path | None:
    """The newest complete, intact checkpoint, or None when there is no complete one. Temporary folders
    are ignored; an old copy moved aside by a re-save that was killed before the new copy landed counts
    as its step. A damaged checkpoint (`damage`) or one in `skip` (path -> what is wrong) is passed
    over with a warning naming the file; if every complete one is damaged, `CheckpointDamaged` names
    them all. Read-only (a reader may look while the run is writing); the next save settles leftovers."""
    root = Path(run_dir) / "checkpoints"
    found = _complete(root)
    names = {p.name for p in found}
    found += [a for a in _complete(root, _ASIDE + _PREFIX) if a.name.removeprefix(_ASIDE) not in names]
    problems = []
    for path in sorted(found, key=lambda p: p.name.removeprefix(_ASIDE), reverse=True):
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
    whole: meta.json must be a JSON object with an integer step, and state.pt a torch archive (a zip
    whose directory sits at its very end, so any truncation or an empty file shows). It reads only
    meta.json and the archive's directory; `load_checkpoint` reports damage inside the tensors."""
    meta = path / "meta.json"
    try:
        data = json.loads(meta.read_bytes())
    except (OSError, ValueError) as e:
        return f"{meta} is damaged ({type(e).__name__}: {e})"
    if not isinstance(data, dict) or type(data.get("step")) is not int:
        return f"{meta} is damaged (not a checkpoint's meta: no integer 'step')"
    if data.get("sharded") and not (path / "learner" / ".metadata").is_file():
        return f"{path / 'learner'} is damaged (the sharded learner state has no .metadata index)"
    state = path / "state.pt"
    try:
        with zipfile.ZipFile(state) as z:
            z.namelist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
        size = state.stat().st_size if state.exists() else 0
        return f"{state} is damaged ({size} bytes: truncated or not a torch archive: {e})"
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
    for aside in root.glob(f"{_ASIDE}{_PREFIX}*"):
        name = root / aside.name.removeprefix(_ASIDE)
        if _is_complete(aside) and not name.exists():  # killed between moving it aside and renaming the new one in
            os.rename(aside, name)
        elif _is_complete(name) or not _is_complete(aside):  # killed after the new copy landed
            shutil.rmtree(aside, ignore_errors=True)


def _is_complete(path: Path) -> bool:
    return (path / "state.pt").is_file() and (path / "meta.json").is_file()


def load_checkpoint(path: str | Path, map_location=None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(payload, meta) of a checkpoint folder; tensors go to `map_location` (default: where saved).
    An unreadable file raises `CheckpointDamaged` naming it."""
    path = Path(path)
    meta = load_checkpoint_meta(path)
    problem = damage(path)
    if problem is not None:
        raise CheckpointDamaged(problem)
    try:
        payload = torch.load(path / "state.pt", weights_only=False, map_location=map_location)
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, AttributeError, ImportError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise CheckpointDamaged(f"{path / 'state.pt'} is damaged ({type(e).__name__}: {first})") from None
    if not isinstance(payload, dict):
        raise CheckpointDamaged(f"{path / 'state.pt'} is damaged (not a checkpoint's state: {type(payload).__name__})")
    return payload, meta


def load_weights(model: torch.nn.Module, path: str | Path, payload: dict[str, Any]) -> None:
    """The checkpoint's trainable weights into `model` (unsharded): from `payload["model"]`, or from the
    fsdp2 learner's shards under <path>/learner (`covey.runtime.dcp`, read in this one process)."""
    if "model" not in payload:
        from covey.runtime.dcp import has_shards, load_weights as load_sharded

        if not has_shards(path):
            raise CheckpointDamaged(f"{path} holds no weights (no model entry in state.pt and no learner/ shards)")
        load_sharded(model, path)
        return
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = trainable - set(payload["model"])
    if missing:
        raise ValueError(f"checkpoint {path} lacks weights {sorted(missing)[:3]}...: was it written by another model?")
    model.load_state_dict(payload["model"], strict=False)


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
