"""`plan_config`: a run config (YAML + overrides) to a `MemoryPlan`, without loading any weights.

The config is read as `covey train` reads it, with two differences, so that a laptop can plan a GPU
cluster's run: `device` is checked for its spelling only (`cuda` plans for a GPU on a machine
without one; `auto` is what this machine would use), and the `runtime:` section is validated field
by field (`RuntimeConfig`) without `check_runtime`, so settings that need Ray or are not built yet
(sharding fsdp2, colocate, ...) can be planned. The model's shape comes from its config.json
(`covey.models.loading.model_config`: an alias, a local folder, a cached or bundled hub model).

Where the pools sit (`MemoryPlan.devices`): inline and thread executors run the learner and the
engine in one process on one device (inline: their fixed memory plus the larger of the update's and
the generate call's transient memory, since they take turns; thread: both at once); the Ray executor
puts learner ranks and engine actors on devices of their own, or with `runtime.colocate` one of each
on a shared device (their peaks add: two processes, each with its own allocator cache).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pydantic

from covey.plan.arch import Architecture
from covey.plan.memory import GiB, Pool, Settings, engine_pool, learner_pool

__all__ = ["DeviceLoad", "MemoryPlan", "plan_config", "plan_settings"]


@dataclass(frozen=True)
class DeviceLoad:
    name: str
    count: int
    bytes: float
    capacity: float

    @property
    def fits(self) -> bool:
        return self.bytes <= self.capacity

    def verdict(self) -> str:
        cap, need = self.capacity / GiB, self.bytes / GiB
        if self.fits:
            return f"fits on {cap:g} GiB with {cap - need:.1f} GiB to spare"
        return f"does not fit on {cap:g} GiB: needs {need:.1f} GiB ({need - cap:.1f} GiB over)"


@dataclass
class MemoryPlan:
    model: str
    arch: Architecture
    settings: Settings
    learner: Pool
    engine: Pool
    devices: list[DeviceLoad]
    notes: list[str] = field(default_factory=list)

    @property
    def params(self) -> int:
        return self.arch.total

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)

    def to_json(self) -> dict:
        def pool(p: Pool) -> dict:
            items = [{"name": i.name, "gib": round(i.bytes / GiB, 4), "phase": i.phase, "where": i.where, "note": i.note}
                     for i in p.items]  # fmt: skip
            return {"devices": p.devices, "items": items, "peak_gib": round(p.peak / GiB, 4), "host_gib": round(p.host / GiB, 4),
                    "notes": p.notes}  # fmt: skip

        return {
            "model": self.model,
            "params": self.arch.total,
            "architecture": asdict(self.arch),
            "settings": asdict(self.settings),
            "pools": {"learner": pool(self.learner), "engine": pool(self.engine)},
            "devices": [{"name": d.name, "count": d.count, "gib": round(d.bytes / GiB, 4), "capacity_gib": d.capacity / GiB,
                         "fits": d.fits, "verdict": d.verdict()} for d in self.devices],  # fmt: skip
            "fits": self.fits,
            "notes": self.notes,
        }


def plan_config(path: str | Path | None, overrides: list[str] | None = None, *, prompt_tokens: int = 256,
                device_memory_gb: float | None = None) -> MemoryPlan:  # fmt: skip
    """The memory plan of the run config at `path` with `overrides`, for prompts of `prompt_tokens`
    tokens on devices of `device_memory_gb` GiB (default: this machine's CUDA device's, else 80)."""
    from covey.models.loading import model_config

    if prompt_tokens < 1:
        raise ValueError(f"--prompt-tokens must be >= 1, got {prompt_tokens}")
    if device_memory_gb is not None and not device_memory_gb > 0:
        raise ValueError(f"--device-memory-gb must be > 0, got {device_memory_gb}")
    cfg, runtime, device = _read_config(path, overrides)
    if cfg.model.family != "causal":
        raise ValueError(f"covey plan covers causal LMs; model.family is {cfg.model.family!r}")
    config = model_config(cfg.model.name)
    if config is None:
        raise ValueError(f"cannot read the config.json of model {cfg.model.name!r} without downloading it: give a local "
                         "folder, an alias, or a hub id in the local HF cache (huggingface-cli download ID config.json)")  # fmt: skip
    arch = Architecture.from_config(config, repr(cfg.model.name))
    capacity = (device_memory_gb if device_memory_gb is not None else _default_memory_gb()) * GiB
    s = plan_settings(cfg, runtime, device, arch.hidden, prompt_tokens)
    learner, engine = learner_pool(arch, s), engine_pool(arch, s, capacity)
    plan = MemoryPlan(cfg.model.name, arch, s, learner, engine, _devices(s, learner, engine, capacity))
    if s.executor == "ray" and s.learner_workers > 1:
        plan.notes.append("the driver process also loads the policy (fp32) on its device; not counted here")
    if s.engine not in ("torch", "vllm"):
        plan.notes.append(f"engine {s.engine!r} is planned as the torch engine")
    if prompt_tokens + s.new_tokens > config.get("max_position_embeddings", 1 << 30):
        plan.notes.append(f"prompt + max_new_tokens = {prompt_tokens + s.new_tokens} tokens exceeds the model's "
                          f"max_position_embeddings ({config['max_position_embeddings']})")  # fmt: skip
    return plan


def plan_settings(cfg, runtime, device: str, hidden: int, prompt_tokens: int) -> Settings:
    """The `Settings` of RunConfig `cfg` with `runtime` (a RuntimeConfig) on `device` ("cuda" | "cpu")."""
    from covey.dtypes import resolve_dtype_name

    dtype = "bf16" if cfg.model.dtype == "auto" and device == "cuda" else resolve_dtype_name(cfg.model.dtype, "cpu", hidden)
    ep = cfg.engine.params
    engine_dtype = ep.get("dtype", "auto")
    engine_dtype = dtype if engine_dtype == "auto" else resolve_dtype_name(engine_dtype, "cpu", hidden)
    lora = cfg.model.lora
    targets = lora.target_modules if lora is not None else "all-linear"
    return Settings(
        device=device, dtype=dtype,
        prompts_per_step=cfg.rollout.prompts_per_step, group_size=cfg.rollout.group_size,
        prompt_tokens=prompt_tokens, new_tokens=cfg.sampling.max_new_tokens,
        micro_batch_size=cfg.optim.micro_batch_size, mini_batches=cfg.optim.mini_batches,
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        lora_rank=lora.r if lora is not None else None, lora_targets=targets if isinstance(targets, str) else tuple(targets),
        reference=("ref_logprobs" in cfg.algo.requires()) or cfg.preference is not None,
        executor=runtime.executor, learner_workers=runtime.learner_workers, engine_workers=runtime.engine_workers,
        sharding=runtime.sharding, fsdp_offload=runtime.fsdp_offload, colocate=runtime.colocate,
        engine=cfg.engine.name, engine_dtype=engine_dtype,
        engine_max_rows=int(ep.get("max_rows", 256)), engine_max_cache_bytes=int(ep.get("max_cache_bytes", 2 << 30)),
        vllm_memory_fraction=float(ep.get("gpu_memory_utilization", 0.5)),
    )  # fmt: skip


def _read_config(path, overrides):
    """(RunConfig with the default runtime and device, the RuntimeConfig, "cuda" | "cpu")."""
    import torch

    from covey.runtime.config import RuntimeConfig
    from covey.train.config import ConfigError, raw_config, validate_config

    raw = raw_config(path, overrides)
    source = str(path) if path else "overrides"
    runtime_raw, device = raw.pop("runtime", None) or {}, raw.pop("device", "auto")
    if not isinstance(runtime_raw, dict):
        raise ConfigError(f"invalid configuration in {source}: runtime must be a mapping of keys, got {runtime_raw!r}")
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ConfigError(f"invalid configuration in {source}: device must be auto, cpu, cuda or cuda:N, got {device!r}")
    cfg = validate_config(raw, source)
    try:
        runtime = RuntimeConfig.model_validate(runtime_raw)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in ("runtime", *err["loc"]))
        got = f" (got {err['input']!r})" if "input" in err and err["type"] != "extra_forbidden" else ""
        raise ConfigError(f"invalid configuration in {source}: {key}: {err['msg']}{got}") from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return cfg, runtime, "cuda" if device.startswith("cuda") else "cpu"


def _default_memory_gb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / GiB
    return 80.0


def _devices(s: Settings, learner: Pool, engine: Pool, capacity: float) -> list[DeviceLoad]:
    """The devices of the run and what each holds (see the module docstring)."""
    if s.executor != "ray":
        fixed = learner.peak - learner.transient + engine.peak - engine.transient
        turns = (learner.transient, engine.transient)
        need = fixed + (sum(turns) if s.executor == "thread" else max(turns))
        return [DeviceLoad(f"{s.device} device (learner and engine, {s.executor} executor)", 1, need, capacity)]
    n, e = learner.devices, engine.devices
    if not s.colocate:
        return [DeviceLoad("learner device", n, learner.peak, capacity), DeviceLoad("engine device", e, engine.peak, capacity)]
    out = [DeviceLoad("shared device (a learner rank and an engine)", min(n, e), learner.peak + engine.peak, capacity)]
    if n > e:
        out.append(DeviceLoad("learner device", n - e, learner.peak, capacity))
    if e > n:
        out.append(DeviceLoad("engine device", e - n, engine.peak, capacity))
    return out
