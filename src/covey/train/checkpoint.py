"""Atomic checkpoints: everything a run needs to continue exactly as if never stopped.

A checkpoint is a folder RUN_DIR/checkpoints/step-NNNNNN/ holding the trainable weights (full state
dict, or only the LoRA adapter), optimizer, scheduler, every RNG state, the sampler state, the step
counter, the resolved config, and the state of every stateful component (sampler, rollout
strategy: `state_dict()` saved with torch.save so tensors and int keys survive). It is written into a temporary folder next to its final place,
fsynced, then renamed: a kill at any moment leaves either the previous checkpoint or the new one,
never half of one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

__all__ = ["latest_checkpoint", "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]

_PREFIX = "step-"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: str | Path, step: int, payload: dict[str, Any], meta: dict[str, Any], keep: int = 2) -> Path:
    """Write `payload` (tensors/state dicts, saved with torch.save) and `meta` (JSON) atomically."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(payload, tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps({"step": step, **meta}, indent=1, default=str))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a periodic save)
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for old in sorted(root.glob(f"{_PREFIX}*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = sorted((Path(run_dir) / "checkpoints").glob(f"{_PREFIX}*"))
    return found[-1] if found else None


def load_checkpoint(path: str | Path, map_location=None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(payload, meta) of a checkpoint folder; tensors go to `map_location` (default: where saved)."""
    path = Path(path)
    if not (path / "state.pt").is_file() or not (path / "meta.json").is_file():
        raise FileNotFoundError(f"{path} is not a complete covey checkpoint (state.pt + meta.json)")
    payload = torch.load(path / "state.pt", weights_only=False, map_location=map_location)
    return payload, json.loads((path / "meta.json").read_text())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
