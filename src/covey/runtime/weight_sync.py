"""Weight sync behind one interface: how the learner's new weights reach an engine.

    handle = sync.push(model_or_state, version)     # learner side; the handle is small and picklable
    state, version = sync.pull(handle)             # engine side; then engine.load_weights(state, version)

Three transports (`WEIGHT_SYNCS`):

- `inprocess`: the handle is a detached copy of the tensors (the thread executor; one process).
- `disk`: a directory per version under `root`: `weights.safetensors` with the version and kind in
  its metadata, then an empty `READY` marker written last (by rename, so a reader never sees half a
  file). `pull` waits for the marker at most `timeout_s`. With LoRA only the adapter is written
  (each LoRA module's A and B and its scale, plus any other trainable tensor); the reader merges
  W = W_base + scale * B @ A onto the base weights it was given. Older versions beyond `keep` are
  removed. Works across processes and machines that share a file system.
- `object_store`: one `ray.put` per version; the handle is the object ref (Ray actors and nodes).

GPU engines on other devices would use NCCL broadcast (verl, slime, OpenRLHF: a process group of
the learner's rank 0 and the engines) or CUDA IPC handles when they share a GPU (verl's colocated
mode); not built here (docs/runtime.md).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
import torch
from torch import Tensor

__all__ = ["DiskSync", "InProcessSync", "ObjectStoreSync", "WEIGHT_SYNCS", "lora_adapter", "merge_lora"]


def _full_state(source) -> dict[str, Tensor]:
    from covey.models.state import engine_state

    state = engine_state(source) if isinstance(source, torch.nn.Module) else source
    state = state.state_dict() if hasattr(state, "state_dict") else dict(state)
    return {k: v.detach().cpu().clone().contiguous() for k, v in state.items()}


def lora_adapter(model) -> tuple[dict[str, Tensor], dict[str, float]]:
    """A PEFT LoRA model's adapter: tensors `<module>.lora_A` [r, in], `<module>.lora_B` [out, r]
    (names of the base model), the other trainable tensors under their base names, and each LoRA
    module's scale (alpha / r, or alpha / sqrt(r) with rsLoRA). Refuses what a plain B @ A merge
    does not cover (DoRA, fan_in_fan_out, several active adapters)."""
    from peft.tuners.lora import LoraLayer

    tensors, scales = {}, {}
    base = model.get_base_model()
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        active = [a for a in module.active_adapters if a in module.lora_A]
        if len(active) != 1 or module.use_dora.get(active[0]) or getattr(module, "fan_in_fan_out", False):
            raise ValueError(f"disk weight sync: LoRA module {name!r} needs a plain single-adapter merge (no DoRA, fan_in_fan_out)")
        a = active[0]
        tensors[f"{name}.lora_A"] = module.lora_A[a].weight.detach().cpu().clone().contiguous()
        tensors[f"{name}.lora_B"] = module.lora_B[a].weight.detach().cpu().clone().contiguous()
        scales[name] = float(module.scaling[a])
    for name, p in base.named_parameters():
        if p.requires_grad and "lora_" not in name:
            tensors[name.replace(".modules_to_save.default.", ".")] = p.detach().cpu().clone().contiguous()
    return tensors, scales


def merge_lora(base: dict[str, Tensor], adapter: dict[str, Tensor], scales: dict[str, float]) -> dict[str, Tensor]:
    """Full weights from the base weights and an adapter (`lora_adapter`): W = W_base + scale * B @ A."""
    out = dict(base)
    for module, scale in scales.items():
        w = base[f"{module}.weight"]
        delta = adapter[f"{module}.lora_B"].float() @ adapter[f"{module}.lora_A"].float()
        out[f"{module}.weight"] = (w.float() + scale * delta).to(w.dtype)
    for name, t in adapter.items():
        if not name.endswith((".lora_A", ".lora_B")):
            out[name] = t
    return out


class InProcessSync:
    """The handle is the weights themselves (a copy the learner will not touch again)."""

    name = "inprocess"

    def push(self, source, version: int):
        return _full_state(source), int(version)

    def pull(self, handle) -> tuple[dict[str, Tensor], int]:
        return handle


class DiskSync:
    """safetensors + a READY marker per version under `root` (see the module docstring)."""

    name = "disk"

    def __init__(self, root: str | os.PathLike, *, timeout_s: float = 600.0, keep: int = 2,
                 base: dict[str, Tensor] | None = None):  # fmt: skip
        self.root, self.timeout_s, self.keep = Path(root), float(timeout_s), int(keep)
        self.base = base  # the reader's base weights, needed to merge a LoRA adapter

    def push(self, source, version: int) -> str:
        from safetensors.torch import save_file

        if isinstance(source, torch.nn.Module) and hasattr(source, "get_base_model"):
            tensors, scales = lora_adapter(source)
            meta = {"version": str(int(version)), "kind": "lora", "scales": json.dumps(scales)}
        else:
            tensors, meta = _full_state(source), {"version": str(int(version)), "kind": "full"}
        final = self.root / f"v{int(version):08d}"
        tmp = self.root / f".tmp-v{int(version):08d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file(tensors, str(tmp / "weights.safetensors"), metadata=meta)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        marker = final / ".READY.tmp"
        marker.write_text(str(int(version)))
        marker.rename(final / "READY")  # last: a reader that sees READY sees the whole file
        versions = sorted(p for p in self.root.glob("v*") if p.is_dir())
        for old in versions[: max(0, len(versions) - self.keep)]:
            shutil.rmtree(old, ignore_errors=True)
        return str(final)

    def pull(self, handle: str) -> tuple[dict[str, Tensor], int]:
        from safetensors import safe_open

        path = Path(handle)
        deadline = time.monotonic() + self.timeout_s
        while not (path / "READY").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"disk weight sync: no READY marker in {path} within {self.timeout_s:g} s")
            time.sleep(0.05)
        with safe_open(str(path / "weights.safetensors"), framework="pt") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        version = int(meta["version"])
        if meta["kind"] == "lora":
            if self.base is None:
                raise ValueError(f"disk weight sync: {path} holds a LoRA adapter; the reader needs its base weights (base=...)")
            tensors = merge_lora(self.base, tensors, json.loads(meta["scales"]))
        return tensors, version


class ObjectStoreSync:
    """One `ray.put` per version; `pull` resolves the ref (at most `timeout_s`)."""

    name = "object_store"

    def __init__(self, timeout_s: float = 600.0):
        self.timeout_s = float(timeout_s)

    def push(self, source, version: int):
        import ray

        return ray.put(_full_state(source)), int(version)

    def pull(self, handle) -> tuple[dict[str, Tensor], int]:
        import ray

        ref, version = handle
        state = ray.get(ref, timeout=self.timeout_s) if isinstance(ref, ray.ObjectRef) else ref
        return state, version


WEIGHT_SYNCS = {"inprocess": InProcessSync, "disk": DiskSync, "object_store": ObjectStoreSync}
