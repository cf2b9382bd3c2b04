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

- `broadcast`: a torch.distributed process group of the learner's side (rank 0: the driver, which
  holds the learner's weights; with fsdp2 learner actors it received them from learner rank 0, who
  gathered them bucket by bucket) and the engine workers (ranks 1..E), NCCL when the run is on CUDA,
  else gloo, as verl, OpenRLHF and slime sync. It is its own group (a TCPStore at the driver and a
  ProcessGroupGloo/NCCL object), not the default one, so it never meets the learners' group or an
  engine's own (vLLM's). `push` sends no tensor: it returns the plan (names, shapes, dtypes in
  buckets of at most `bucket_bytes`); the engines call `pull(plan)` and wait in the broadcast, and
  `send(plan)` then broadcasts bucket by bucket (one flat tensor per dtype per bucket), moving each
  bucket from the model to the wire without a full second copy on the sender. Every collective
  times out after `timeout_s`.

Every transport records its last transfer in `last` (`weight_sync/bytes`, `time/weight_sync`: push + send).
CUDA IPC handles for engines that share a GPU with the learner (verl's colocated mode) are not built.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
import torch
from torch import Tensor

__all__ = ["BroadcastSync", "DiskSync", "InProcessSync", "ObjectStoreSync", "WEIGHT_SYNCS", "lora_adapter", "merge_lora"]


def _engine_tensors(source) -> dict[str, Tensor]:
    """What an engine loads from `source` (a model: its weights, LoRA merged; or a state dict), not copied."""
    from covey.models.state import engine_state

    state = engine_state(source) if isinstance(source, torch.nn.Module) else source
    return state.state_dict() if hasattr(state, "state_dict") else dict(state)


def _full_state(source) -> dict[str, Tensor]:
    return {k: v.detach().cpu().clone().contiguous() for k, v in _engine_tensors(source).items()}


def _nbytes(state: dict[str, Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


class _Timed:
    """`last`: the bytes and seconds of the newest transfer (push, plus send for broadcast)."""

    last: dict[str, float] = {}

    def send(self, handle) -> None:
        """Transports that move the tensors in `push` have nothing left to send."""

    def close(self) -> None:
        """Transports that hold no connection have nothing to close."""


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


class InProcessSync(_Timed):
    """The handle is the weights themselves (a copy the learner will not touch again)."""

    name = "inprocess"

    def push(self, source, version: int):
        t0 = time.perf_counter()
        state = _full_state(source)
        self.last = {"weight_sync/bytes": float(_nbytes(state)), "time/weight_sync": time.perf_counter() - t0}
        return state, int(version)

    def pull(self, handle) -> tuple[dict[str, Tensor], int]:
        return handle


class DiskSync(_Timed):
    """safetensors + a READY marker per version under `root` (see the module docstring)."""

    name = "disk"

    def __init__(self, root: str | os.PathLike, *, timeout_s: float = 600.0, keep: int = 2,
                 base: dict[str, Tensor] | None = None):  # fmt: skip
        self.root, self.timeout_s, self.keep = Path(root), float(timeout_s), int(keep)
        self.base = base  # the reader's base weights, needed to merge a LoRA adapter

    def push(self, source, version: int) -> str:
        from safetensors.torch import save_file

        t0 = time.perf_counter()
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
        self.last = {"weight_sync/bytes": float(_nbytes(tensors)), "time/weight_sync": time.perf_counter() - t0}
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


class ObjectStoreSync(_Timed):
    """One `ray.put` per version; `pull` resolves the ref (at most `timeout_s`)."""

    name = "object_store"

    def __init__(self, timeout_s: float = 600.0):
        self.timeout_s = float(timeout_s)

    def push(self, source, version: int):
        import ray

        t0 = time.perf_counter()
        state = _full_state(source)
        ref = ray.put(state)
        self.last = {"weight_sync/bytes": float(_nbytes(state)), "time/weight_sync": time.perf_counter() - t0}
        return ref, int(version)

    def pull(self, handle) -> tuple[dict[str, Tensor], int]:
        import ray

        ref, version = handle
        state = ray.get(ref, timeout=self.timeout_s) if isinstance(ref, ray.ObjectRef) else ref
        return state, version


class BroadcastSync(_Timed):
    """A process group of the sender (rank 0) and the engine workers (see the module docstring)."""

    name = "broadcast"

    def __init__(self, timeout_s: float = 600.0, bucket_bytes: int = 256 << 20, backend: str = "gloo"):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"broadcast weight sync: backend must be gloo or nccl, got {backend!r}")
        self.timeout_s, self.bucket_bytes, self.backend = float(timeout_s), int(bucket_bytes), backend
        self._pg = self._store = self._pending = None
        self.rank = None

    def __getstate__(self):  # the engine workers get an unconnected copy; each connects its own rank
        return {**self.__dict__, "_pg": None, "_store": None, "_pending": None, "rank": None}

    @staticmethod
    def address() -> tuple[str, int]:
        """A free port on this node, for the sender's rendezvous store."""
        import socket

        try:
            import ray

            host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
        except ImportError:
            host = "127.0.0.1"
        with socket.socket() as sock:
            sock.bind(("", 0))
            return host, sock.getsockname()[1]

    def connect(self, rank: int, world: int, host: str, port: int) -> None:
        """Join the group as `rank` of `world` (every member at once: the rendezvous waits for all)."""
        from datetime import timedelta

        import torch.distributed as dist

        timeout = timedelta(seconds=self.timeout_s)
        self._store = dist.TCPStore(host, port, world, rank == 0, timeout=timeout, wait_for_workers=False)
        if self.backend == "nccl":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            self._pg = dist.ProcessGroupNCCL(self._store, rank, world, opts)
        else:
            self._pg = dist.ProcessGroupGloo(self._store, rank, world, timeout)
        self.rank = rank

    def _device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def push(self, source, version: int) -> dict:
        """The plan of this version's transfer (no tensor moves yet): `send` broadcasts it."""
        if self._pg is None or self.rank != 0:
            raise RuntimeError("broadcast weight sync: push needs the sender's connected group (rank 0)")
        t0 = time.perf_counter()
        state = _engine_tensors(source)
        buckets, size = [[]], 0
        for name, t in state.items():
            nbytes = t.numel() * t.element_size()
            if buckets[-1] and size + nbytes > self.bucket_bytes:
                buckets.append([])
                size = 0
            buckets[-1].append((name, tuple(t.shape), str(t.dtype).removeprefix("torch.")))
            size += nbytes
        self._pending = (state, t0)
        return {"version": int(version), "buckets": buckets}

    def send(self, handle: dict) -> None:
        """Broadcast the planned buckets (the engines are waiting in `pull`)."""
        state, t0 = self._pending
        self._pending = None
        total = 0
        for bucket in handle["buckets"]:
            for flat in self._flats(bucket, {name: state[name] for name, *_ in bucket}):
                self._broadcast(flat)
                total += flat.numel() * flat.element_size()
        self.last = {"weight_sync/bytes": float(total), "time/weight_sync": time.perf_counter() - t0}

    def pull(self, handle: dict) -> tuple[dict[str, Tensor], int]:
        out: dict[str, Tensor] = {}
        for bucket in handle["buckets"]:
            for flat, names in zip(self._flats(bucket), _by_dtype(bucket).values()):
                self._broadcast(flat)
                out.update(self._unflatten(flat, [e for e in bucket if e[0] in names]))
        return out, int(handle["version"])

    def _flats(self, bucket: list, tensors: dict[str, Tensor] | None = None) -> list[Tensor]:
        """One flat tensor per dtype of the bucket: the sender's data, or a receiver's empty buffer."""
        flats = []
        for dtype, names in _by_dtype(bucket).items():
            if tensors is None:
                numel = sum(math.prod(e[1]) for e in bucket if e[0] in names)
                flats.append(torch.empty(numel, dtype=getattr(torch, dtype), device=self._device()))
            else:
                flats.append(torch.cat([tensors[n].detach().reshape(-1).to(self._device()) for n in names]))
        return flats

    @staticmethod
    def _unflatten(flat: Tensor, entries: list) -> dict[str, Tensor]:
        out, at = {}, 0
        for name, shape, _ in entries:
            n = math.prod(shape)
            out[name] = flat[at : at + n].view(shape).cpu()
            at += n
        return out

    def _broadcast(self, t: Tensor) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self._pg.broadcast([t], opts).wait()

    def close(self) -> None:
        self._pg = self._store = None


def _by_dtype(bucket: list) -> dict[str, list[str]]:
    """{dtype: names in bucket order} of a planned bucket (name, shape, dtype)."""
    out: dict[str, list[str]] = {}
    for name, _, dtype in bucket:
        out.setdefault(dtype, []).append(name)
    return out


WEIGHT_SYNCS = {"inprocess": InProcessSync, "disk": DiskSync, "object_store": ObjectStoreSync, "broadcast": BroadcastSync}
