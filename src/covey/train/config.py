"""Typed run configuration: YAML file + `key=value` overrides -> a validated `RunConfig`.

Every check here runs before any model is loaded, and every error names the key, the value received
and what is allowed. The algorithm block is `covey.algos.presets.AlgoConfig` (a preset plus per-axis
overrides); this module only adds the run around it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from covey.compat import check_combination
from covey.algos.presets import AlgoConfig, resolve_algo
from covey.algos.presets import AlgoConfig, apply_sampler_preset, resolve_algo, sampler_spec, strategy_spec
from covey.registry import RegistryError, Spec
from covey.rewards import RewardSpec
from covey.runtime.config import RuntimeConfig, check_runtime

__all__ = ["SAFE_ON_RESUME", "ConfigError", "RunConfig", "apply_overrides", "load_config", "parse_overrides", "resume_config"]


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class LoraConfig(_Strict):
    r: int = Field(16, ge=1)
    """Rank of the LoRA update matrices."""
    alpha: float = Field(32.0, gt=0)
    """Scaling numerator: the update is scaled by alpha / r."""
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | str = "all-linear"
    """peft target modules; "all-linear" adapts every linear layer except the output head."""


class ModelConfig(_Strict):
    name: str = Field("tiny-llama", min_length=1)
    """A built-in alias (smollm2-135m-instruct, tiny-llama, tiny-qwen2), a local folder or a hub id."""
    dtype: Literal["bf16", "fp32", "auto"] = "bf16"
    """Learner compute dtype: bf16 autocast (fast on AMX CPUs and GPUs) or full fp32. Weights stay fp32.
    The engine generates in the same dtype unless `engine.dtype` names another (bf16 or fp32).
    auto: bf16 on CUDA; on CPU bf16 only where a quick matmul measurement finds it faster (a resumed run
    keeps the dtype its checkpoint was written with)."""
    lora: LoraConfig | None = None
    """LoRA (peft) adapters instead of full fine-tuning; None trains every weight."""
    gradient_checkpointing: bool = False

    @field_validator("name")
    @classmethod
    def _absolute_local_path(cls, v: str) -> str:
        """A local model folder is stored as an absolute path, so the run's config.yaml works from anywhere."""
        p = Path(v).expanduser()
        return str(p.resolve()) if p.is_dir() else v


class TaskConfig(Spec):
    """The task (`covey.tasks.TASKS`): a registered name or ``package.module:Task``, its parameters
    (flat keys or under ``params:``; a parameter named like a field below goes under ``params:``)."""

    name: str = "arithmetic"
    """A registered task (`covey list`): arithmetic, countdown, gsm8k, math500, mbpp, humaneval, dataset."""
    params: dict[str, Any] = {}
    """Keyword arguments of the task (e.g. digits, operands, path)."""
    split: str = "train"
    eval_split: str = "test"
    on_long_prompt: Literal["error", "skip"] = "error"
    """A prompt longer than the model's context minus max_new_tokens (or the task's max_prompt_tokens):
    fail at start, or skip it (counted)."""

    @field_validator("params")
    @classmethod
    def _absolute_data_paths(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Local data paths (`path`, `eval_path`) are stored absolute, so the run's config.yaml (and
        --resume) works from any folder."""
        out = dict(v)
        for key in ("path", "eval_path"):
            if isinstance(out.get(key), str) and Path(out[key]).expanduser().exists():
                out[key] = str(Path(out[key]).expanduser().resolve())
        return out


class SamplingConfig(_Strict):
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    min_p: float = Field(0.0, ge=0, lt=1)
    max_new_tokens: int = Field(64, ge=1)
    stop_strings: list[Annotated[str, Field(min_length=1)]] = []
    ignore_eos: bool = False
    """Never stop at EOS: every completion is max_new_tokens long (benchmarks; stop_strings still apply)."""


class SamplerSpec(Spec):
    """`covey.samplers.SAMPLERS`: uniform (default), or your own ``package.module:Class``."""

    name: str = "uniform"


class StrategySpec(Spec):
    """`covey.strategies.STRATEGIES`: group (default), dynamic, or your own ``package.module:Class``."""

    name: str = "group"


class EngineSpec(Spec):
    """`covey.engine.ENGINES`: torch (default; params dtype, max_rows, ...), or ``package.module:Class``."""

    name: str = "torch"


class RolloutConfig(_Strict):
    prompts_per_step: int = Field(8, ge=1)
    """Prompts (groups) per training step, B."""
    group_size: int = Field(8, ge=1)
    """Completions per prompt, G."""
    strategy: StrategySpec = StrategySpec()
    """How items become completions (`covey.strategies.STRATEGIES`)."""


class OptimConfig(_Strict):
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    """AdamW (beta1, beta2), each in [0, 1)."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)
    epochs: int = Field(1, ge=1)
    """PPO epochs: passes over each rollout batch."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per epoch; the batch of N = B*G rows is split into this many mini-batches."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Rows per forward/backward (gradient accumulation); None = the whole mini-batch at once."""


class LogConfig(_Strict):
    dir: str = "runs"
    name: str | None = None
    """Run folder name under `dir`; default: <task>-<preset>-<timestamp>."""
    report_to: list[Literal["jsonl", "tensorboard", "wandb"]] = ["jsonl", "tensorboard"]
    """Metric sinks. RUN/metrics.jsonl is always written (plots and resume read it); tensorboard writes
    RUN/tb/; wandb (optional package) logs to Weights & Biases in `wandb_mode`."""
    tensorboard: bool | None = None
    """Shorthand kept for old configs: false drops tensorboard from report_to, true adds it."""
    wandb_project: str = "covey"
    wandb_mode: Literal["offline", "online"] = "offline"
    """offline needs no network (sync later with `wandb sync RUN/wandb`)."""
    completions_every: int = Field(0, ge=0)
    """Every N steps write sample prompts/completions/rewards to RUN/samples.jsonl and print a small table (0 = never)."""
    completions_rows: int = Field(4, ge=1)
    """Rows per sample table (the first rows of the batch)."""
    progress: bool = True
    """A live progress bar on a terminal; one plain line per step otherwise (or with progress: false)."""

    @model_validator(mode="after")
    def _tensorboard_shorthand(self) -> "LogConfig":
        if self.tensorboard is not None:
            sinks = [s for s in self.report_to if s != "tensorboard"]
            object.__setattr__(self, "report_to", sinks + (["tensorboard"] if self.tensorboard else []))
            object.__setattr__(self, "tensorboard", None)
        return self


class CheckpointConfig(_Strict):
    every: int = Field(0, ge=0)
    """Write a checkpoint every N steps (0 = only at the end and on Ctrl-C)."""
    keep: int = Field(2, ge=1)


class EvalConfig(_Strict):
    size: int = Field(0, ge=0)
    """Held-out prompts evaluated (greedy) before and after training; 0 = skip."""
    every: int = Field(0, ge=0)
    max_new_tokens: int | None = Field(None, ge=1)
    """Token budget of the held-out evaluation (default: sampling.max_new_tokens)."""


class RunConfig(_Strict):
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    rewards: list[RewardSpec] = []
    """Extra rewards; the task's own verifier is always the first column, named `accuracy`."""
    task_reward_weight: float = 1.0
    task_reward_timeout_s: float = Field(60.0, gt=0)
    reward_workers: int = Field(2, ge=0)
    """Worker processes for reward functions (per-call timeouts need workers; 0 = in-process)."""
    sampling: SamplingConfig = SamplingConfig()
    sampler: SamplerSpec = SamplerSpec()
    """Which prompts each step rolls out (`covey.samplers.SAMPLERS`)."""
    rollout: RolloutConfig = RolloutConfig()
    engine: EngineSpec = EngineSpec()
    """Generation engine (`covey.engine.ENGINES`); the torch engine takes dtype: bf16 | fp32 |
    auto; unset or auto, it follows the learner (model.dtype)."""
    device: str = "auto"
    """Where the model, engine and every per-step tensor live: auto (CUDA when present), cpu, cuda, cuda:N."""
    threads: int = Field(0, ge=0)
    """torch CPU threads for generation and learning (0 = torch's default, one per core). On a busy
    machine fewer threads than cores is often faster: threads that wait on each other stall."""
    algo: AlgoConfig = Field(default_factory=lambda: resolve_algo({"preset": "grpo"}))
    optim: OptimConfig = OptimConfig()
    log: LogConfig = LogConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    eval: EvalConfig = EvalConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    """How the loop runs: executor inline | thread, max_staleness, timeout_s (`covey.runtime.config`)."""
    steps: int = Field(20, ge=1)
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _sampler_preset(cls, raw: Any) -> Any:
        return apply_sampler_preset(raw) if isinstance(raw, dict) else raw

    @field_validator("algo", mode="before")
    @classmethod
    def _resolve_algo(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = {"preset": v}
        return resolve_algo(v) if isinstance(v, dict) else v

    @field_validator("device")
    @classmethod
    def _check_device(cls, v: str) -> str:
        from covey.devices import check_device

        return check_device(v)

    def sampler_spec(self) -> Spec:
        """The sampler to build: `sampler`, or `uniform` when it names a sampler preset."""
        return sampler_spec(self.sampler)

    def strategy_spec(self) -> Spec:
        """The rollout strategy to build: `rollout.strategy`, wrapped for `algo.dynamic_sampling`."""
        return strategy_spec(self.rollout.strategy, self.algo)

    def resolved_device(self) -> str:
        from covey.devices import resolve_device

        return str(resolve_device(self.device))

    @model_validator(mode="after")
    def _check_finite(self) -> "RunConfig":
        """NaN/inf anywhere (also in free-form plugin and component parameters) is a mistake."""
        bad = _non_finite(self.model_dump(mode="python"))
        if bad:
            raise ValueError(f"{bad[0]}: must be a finite number, got {bad[1]!r}")
        return self

    @model_validator(mode="after")
    def _check_plugins(self) -> "RunConfig":
        from covey.engine import ENGINES
        from covey.samplers import SAMPLERS
        from covey.strategies import STRATEGIES
        from covey.strategies.base import check_engine_protocols

        for key, registry, spec in (("sampler", SAMPLERS, self.sampler_spec()), ("engine", ENGINES, self.engine)):
            try:
                registry.check_params(spec.name, spec.params)
            except RegistryError as e:
                raise ValueError(f"{key}: {e}") from None
        check_engine_protocols(self.strategy_spec().name, self.strategy_spec().params, self.engine.name)  # one-line error
        check_combination(self)  # sampler x strategy x advantage: covey.compat
        check_runtime(self)  # executor x strategy x staleness: covey.runtime.config
        spec = self.strategy_spec()
        try:  # built now (cheap, no context): a strategy that wraps another (dynamic) checks its inner one
            STRATEGIES.build(spec.name, spec.params)
        except ValueError as e:  # a RegistryError, or the strategy's own check of its parameters
            raise ValueError(f"rollout.strategy: {e}") from None
        return self

    @model_validator(mode="after")
    def _check_reward_columns(self) -> "RunConfig":
        """One name per reward column, one column per penalty (`covey.rewards.scoring.check_reward_columns`)."""
        from covey.rewards.scoring import check_reward_columns

        try:
            check_reward_columns(self.rewards, self.algo, self.sampling.max_new_tokens)
        except RegistryError as e:  # an unknown reward name: say where
            raise ValueError(f"rewards: {e}") from None
        return self

    @model_validator(mode="after")
    def _check_combinations(self) -> "RunConfig":
        n = self.rollout.prompts_per_step * self.rollout.group_size
        if n % self.optim.mini_batches:
            raise ValueError(
                f"optim.mini_batches={self.optim.mini_batches} must divide the batch of "
                f"rollout.prompts_per_step*rollout.group_size = {n} rows"
            )
        if self.eval.every and not self.eval.size:
            raise ValueError(f"eval.every={self.eval.every} evaluates nothing because eval.size is 0: "
                             "set eval.size to the number of held-out prompts")  # fmt: skip
        return self


def _non_finite(value: Any, key: str = "") -> tuple[str, float] | None:
    """(dotted key, value) of the first NaN/inf float in a nested dict/list, or None."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return key, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for k, v in items:
        found = _non_finite(v, f"{key}.{k}" if key else str(k))
        if found:
            return found
    return None


# ------------------------------------------------------------------------------------------ loading
def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`["algo=dapo", "rollout.group_size=4"]` -> nested dict; values parsed as YAML scalars/lists."""
    out: dict[str, Any] = {}
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {arg!r} must look like key=value (e.g. rollout.group_size=4)")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.split(".")
        if parts[0] == "algo" and isinstance(out.get("algo"), str):
            out["algo"] = {"preset": out["algo"]}  # `algo=<preset>` shorthand, then per-key overrides
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {arg!r} conflicts with an earlier override of {p!r}")
        node[parts[-1]] = value
    return out


def apply_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `overrides` into a copy of `base`. `algo=<preset>` replaces the whole algo block."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if key == "algo" and isinstance(value, str):
            out["algo"] = {"preset": value}
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = apply_overrides(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), str) and key == "algo":
            out[key] = apply_overrides({"preset": out[key]}, value)
        else:
            out[key] = value
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read YAML (or start from defaults), apply `key=value` overrides, validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML ({e})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of keys, got {type(raw).__name__}")
    raw = apply_overrides(raw, parse_overrides(overrides or []))
    return validate_config(raw, source=str(path) if path else "overrides")


SAFE_ON_RESUME = ("steps", "log", "checkpoint", "eval", "reward_workers", "task_reward_timeout_s", "threads")
"""Config keys (and sections) a resumed run may change; everything else must stay as it was trained."""


def resume_config(run_dir: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """The config to resume `run_dir` with: its config.yaml plus `overrides` of `SAFE_ON_RESUME` keys.

    Any other difference from the config the latest checkpoint was trained with (an override, or an
    edit of config.yaml such as a new learning rate) is refused by name instead of silently applied.
    """
    from covey.train.checkpoint import latest_checkpoint

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} is not a covey run folder (no config.yaml)")
    cfg = load_config(run_dir / "config.yaml", overrides)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return cfg  # nothing trained yet: the run starts over with this config
    import json

    saved = json.loads((ckpt / "meta.json").read_text()).get("config")
    if saved is None:
        return cfg
    old, new = _flat(validate_config(saved, source=str(ckpt)).model_dump(mode="json")), _flat(cfg.model_dump(mode="json"))
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k.split(".")[0] not in SAFE_ON_RESUME)
    if changed:
        details = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:5])
        raise ConfigError(
            f"cannot change {details} when resuming {run_dir} (checkpoint {ckpt.name} was trained with the old values); "
            f"a resumed run may change only {', '.join(SAFE_ON_RESUME)}: start a new run to change the rest"
        )
    if old.get("steps") != new.get("steps") and cfg.optim.schedule != "constant":
        import logging

        logging.getLogger("covey").warning(
            "steps %s -> %s on resume: the %s learning-rate schedule is stretched over the new total from the "
            "current step on (the lr jumps to its value at that fraction of the new run)",
            old.get("steps"), new.get("steps"), cfg.optim.schedule)  # fmt: skip
    return cfg


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def validate_config(raw: dict[str, Any], source: str = "config") -> RunConfig:
    from covey.engine.support import UnsupportedModel, check_model_support

    try:
        cfg = RunConfig.model_validate(raw)
        check_model_support(cfg.model.name, cfg.engine.name)  # from config.json, before anything loads
    except pydantic.ValidationError as e:
        raise ConfigError(_explain(e, source)) from None
    except UnsupportedModel as e:
        raise ConfigError(str(e)) from None
    return cfg


def _explain(e: pydantic.ValidationError, source: str) -> str:
    lines = []
    for err in e.errors()[:5]:
        key = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            parent = err["loc"][:-1]
            allowed = _allowed_keys(parent)
            msg = f"unknown key; allowed keys here: {', '.join(allowed)}" if allowed else "unknown key"
        elif "input" in err and err["type"] != "missing" and not isinstance(err["input"], dict):
            msg += f" (got {err['input']!r})"
        lines.append(f"  {key}: {msg}" if key else f"  {msg}")  # a whole-config check names its keys itself
    return f"invalid configuration in {source}:\n" + "\n".join(lines)


def _allowed_keys(loc: tuple) -> list[str]:
    model: Any = RunConfig
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        model = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))
