"""Sharded checkpoints of the fsdp2 learner, through `torch.distributed.checkpoint` (DCP).

A checkpoint of a run with `runtime.sharding: fsdp2` holds, beside the driver's `state.pt` (RNG,
scheduler, sampler and strategy state, no weights) and `meta.json`, a folder `learner/` that the
learner ranks write together: each rank its own shards of the trainable weights and of the AdamW
state, and rank 0 the `.metadata` index. Nothing is gathered to one rank.

Loading reshards: DCP reads the parts each rank needs for the sharding it has now, so a run saved
by 2 ranks resumes on 2 (bit-exact) or on 4 (the same values, resharded), and one process (the
driver, `covey export`, `load_run_policy`) reads the full weights with no process group at all.

Keys are the policy's parameter names (`named_parameters()` of the HF or PEFT model), the same
names a plain checkpoint's `model` entry uses, so `load_weights` fills an unsharded model directly.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

__all__ = ["FOLDER", "full_optimizer_state", "has_shards", "load_optimizer", "load_shards", "load_weights", "save_shards",
           "set_full_optimizer_state"]

FOLDER = "learner"


def _trainable(model: nn.Module) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    keep = _trainable(model)
    weights = {k: v for k, v in get_model_state_dict(model).items() if k in keep}
    return {"model": weights, "optim": get_optimizer_state_dict(model, optimizer)}


def save_shards(model: nn.Module, optimizer: torch.optim.Optimizer, path: str | Path) -> None:
    """Every rank of the learner group calls this with the same `path` (a shared file system)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_state(model, optimizer), checkpoint_id=str(path))


def load_shards(model: nn.Module, optimizer: torch.optim.Optimizer, path: str | Path) -> None:
    """Every rank: its parts of the saved weights and optimizer state, for its current sharding."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=False))
    set_optimizer_state_dict(model, optimizer, state["optim"])


def has_shards(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / FOLDER / ".metadata").is_file()


def load_weights(model: nn.Module, checkpoint: str | Path) -> None:
    """The trainable weights of a sharded checkpoint into an unsharded `model`, in one process."""
    folder = Path(checkpoint) / FOLDER
    keep = _trainable(model)
    state = {n: p.detach().clone() for n, p in model.named_parameters() if n in keep}
    _load_here({"model": state}, folder)
    with torch.no_grad():
        missing = model.load_state_dict(state, strict=False).unexpected_keys
    if missing:
        raise ValueError(f"sharded checkpoint {folder}: weights {missing[:3]} do not belong to this model")


def load_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, checkpoint: str | Path) -> None:
    """The AdamW state of a sharded checkpoint into the optimizer of an unsharded `model` (one process:
    a run resumed by the driver's learner or by ddp ranks after an fsdp2 run)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    state = {"optim": get_optimizer_state_dict(model, optimizer)}  # (makes AdamW's state tensors for DCP to fill)
    _load_here(state, Path(checkpoint) / FOLDER)
    set_optimizer_state_dict(model, optimizer, state["optim"])


def _load_here(state: dict, folder: Path) -> None:
    """dcp.load in this one process, without a process group (DCP warns that it assumes so: it is meant)."""
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(folder), no_dist=True)


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """An unsharded optimizer's state keyed by parameter name (what `set_full_optimizer_state` shards)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))


def set_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Every fsdp2 rank: its shards of a full, name-keyed optimizer state (a plain checkpoint resumed sharded)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))

