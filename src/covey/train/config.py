"""Typed run configuration: YAML file + `key=value` overrides -> a validated `RunConfig`.

Every check here runs before any model is loaded, and every error names the key, the value received
and what is allowed. The algorithm block is `covey.algos.presets.AlgoConfig` (a preset plus per-axis
overrides); this module only adds the run around it.
"""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from covey.compat import check_column_params, check_combination
from covey.algos.presets import AlgoConfig, resolve_algo
from covey.algos.presets import AlgoConfig, apply_sampler_preset, resolve_algo, sampler_spec, strategy_spec
from covey.registry import RegistryError, Spec
from covey.rewards import RewardSpec
from covey.runtime.config import RuntimeConfig, check_runtime
from covey.preference.config import PreferenceConfig, check_preference, no_preference_strategy

__all__ = ["SAFE_ON_RESUME", "ConfigError", "RunConfig", "apply_overrides", "load_config", "parse_overrides", "resume_config"]


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _strict_ints(cls, data: Any) -> Any:
        """An integer field takes an integer: `steps: true` or `steps: 2.5` is refused, not read as 1 or 2."""
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                value = data.get(name)
                if isinstance(value, (bool, float)) and _takes_int(field.annotation):
                    raise ValueError(f"{name}: must be an integer, got {value!r}")
        return data


def _takes_int(annotation: Any) -> bool:
    """int, or int | None (a bool field, or one that also takes bool or float, is not an int field)."""
    if annotation is int:
        return True
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return False
    args = typing.get_args(annotation)
    return int in args and not {bool, float} & set(args)


MAX_GROUP_SIZE = 4096
MAX_PROMPTS_PER_STEP = 65536
MAX_ROWS_PER_STEP = 262144
"""Bounds far above any published setting (BroRL: 512 completions per prompt), below what hangs or
exhausts memory before the first step: a typo such as 1000000000 is refused by name."""


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


class EnvSpec(Spec):
    """`covey.envs.ENVS`: maze, calculator, or your own ``package.module:Class`` (multi-turn agents;
    needs ``rollout.strategy: episodes``, which receives it as its `env` parameter)."""


class EngineSpec(Spec):
    """`covey.engine.ENGINES`: torch (default; params dtype, max_rows, ...), or ``package.module:Class``."""

    name: str = "torch"


class RolloutConfig(_Strict):
    prompts_per_step: int = Field(8, ge=1, le=MAX_PROMPTS_PER_STEP)
    """Prompts (groups) per training step, B."""
    group_size: int = Field(8, ge=1, le=MAX_GROUP_SIZE)
    """Completions per prompt, G. B*G is at most MAX_ROWS_PER_STEP."""
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


def _check_episode_rewards(cfg) -> None:
    """An episode's reward is its environment's (`env_return`): reward functions and reward shaping
    are not applied to episodes, so a config that asks for them is refused, not silently ignored."""
    if cfg.rewards:
        raise ValueError("rewards: reward functions are not applied to episodes (the reward is the environment's "
                         "env_return): remove `rewards:`, or compute the reward in the environment's step()")  # fmt: skip
    if cfg.algo.overlong is not None:
        raise ValueError("algo.overlong: overlong shaping is not applied to episodes (they end by max_turns and "
                         "max_context_tokens): set algo.overlong: null")  # fmt: skip
    kl = cfg.algo.active().get("kl")
    if kl is not None and kl.mode == "reward":
        raise ValueError("algo.kl.mode reward: the KL reward penalty is not applied to episodes: use algo.kl.mode loss")


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
    env: EnvSpec | None = None
    """The environment of multi-turn episodes (`covey.envs.ENVS`); only with rollout.strategy: episodes."""
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
    """How the loop runs: executor inline | thread | ray, max_staleness, timeout_s (`covey.runtime.config`)."""
    preference: PreferenceConfig | None = None
    """Preference mode (DPO, RSO, XPO, TGDPO, GEPO): train a preference loss on pairs (docs/preference.md)."""
    steps: int = Field(20, ge=1, le=10**9)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    """Seeds python, torch and numpy (numpy takes 0 <= seed < 2**32)."""

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
        """The rollout strategy to build: `rollout.strategy` (`episodes` gets the `env:` section as its
        `env` parameter), wrapped for `algo.dynamic_sampling`."""
        s = self.rollout.strategy
        if self.env is not None and s.name == "episodes":
            s = Spec(name="episodes", params={**s.params, "env": {"name": self.env.name, **self.env.params}})
        return strategy_spec(s, self.algo)

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
    def _check_env(self) -> "RunConfig":
        episodes = self.rollout.strategy.name == "episodes"
        if episodes and self.env is None:
            raise ValueError("rollout.strategy episodes needs an environment: add `env: {name: maze}` (see docs/agents.md)")
        if self.env is not None and not episodes:
            raise ValueError(f"env: {self.env.name!r} needs rollout.strategy: episodes (got {self.rollout.strategy.name!r})")
        if episodes and "env" in self.rollout.strategy.params:
            raise ValueError("rollout.strategy.env: give the environment as the top-level `env:` section")
        if self.env is not None:
            from covey.envs import ENVS

            try:
                ENVS.check_params(self.env.name, self.env.params)
            except RegistryError as e:
                raise ValueError(f"env: {e}") from None
            _check_episode_rewards(self)
        return self

    @model_validator(mode="after")
    def _check_plugins(self) -> "RunConfig":
        from covey.engine import ENGINES
        from covey.engine.support import check_engine_config
        from covey.samplers import SAMPLERS
        from covey.strategies import STRATEGIES
        from covey.strategies.base import check_engine_protocols

        for key, registry, spec in (("sampler", SAMPLERS, self.sampler_spec()), ("engine", ENGINES, self.engine)):
            try:
                registry.check_params(spec.name, spec.params)
            except RegistryError as e:
                raise ValueError(f"{key}: {e}") from None
        check_engine_protocols(self.strategy_spec().name, self.strategy_spec().params, self.engine.name)  # one-line error
        check_engine_config(self)  # what the engine cannot serve (vllm: top_p/top_k/min_p, entropies)
        check_combination(self)  # sampler x strategy x advantage: covey.compat
        check_runtime(self)  # executor x strategy x staleness: covey.runtime.config
        spec = self.strategy_spec()
        try:  # built now (cheap, no context): a strategy that wraps another (dynamic) checks its inner one
            STRATEGIES.build(spec.name, spec.params)
        except ValueError as e:  # a RegistryError, or the strategy's own check of its parameters
            raise ValueError(f"rollout.strategy: {e}") from None
        return self

    @model_validator(mode="after")
    def _check_preference(self) -> "RunConfig":
        strategy = self.rollout.strategy.name
        no_preference_strategy(strategy, self.preference)
        if self.preference is not None:
            check_preference(self.preference, self.algo == resolve_algo({"preset": "grpo"}), strategy, self.rewards)
        return self

    @model_validator(mode="after")
    def _check_reward_columns(self) -> "RunConfig":
        """One name per reward column, one column per penalty (`covey.rewards.scoring.check_reward_columns`)."""
        from covey.rewards.scoring import check_reward_columns

        try:
            columns = check_reward_columns(self.rewards, self.algo, self.sampling.max_new_tokens)
        except RegistryError as e:  # an unknown reward name: say where
            raise ValueError(f"rewards: {e}") from None
        check_column_params(self.algo, ["accuracy", *columns])  # dagrpo's score_column, trpa's level_column, ...
        return self

    @model_validator(mode="after")
    def _check_combinations(self) -> "RunConfig":
        n = self.rollout.prompts_per_step * self.rollout.group_size
        if n > MAX_ROWS_PER_STEP:
            raise ValueError(f"rollout.prompts_per_step*rollout.group_size = {n} rows per step; at most {MAX_ROWS_PER_STEP}")
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
MAX_YAML_VALUES = 1_000_000
"""Values a config may hold once YAML aliases are expanded: a few hundred bytes of nested aliases
("billion laughs") expand to gigabytes when validated."""


class _NotYaml(ConfigError):
    """The text does not parse as YAML (an override's value is then taken as a plain string)."""


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (YAML says keys are unique;
    PyYAML keeps the last one silently). Merge keys (``<<: *base``) may still be overridden."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: PyYAML reports it
                    continue
                if first is not key_node:
                    raise ConfigError(f"duplicate key {key!r} (line {first.start_mark.line + 1} and line "
                                      f"{key_node.start_mark.line + 1}): give each key once")  # fmt: skip
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, source: str) -> Any:
    """YAML text -> Python values, refusing duplicate keys and alias bombs (`MAX_YAML_VALUES`)."""
    try:
        data = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise _NotYaml(f"{source}: not valid YAML ({e})") from None
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    try:
        _count_values(data, source)
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    return data


def _count_values(data: Any, source: str) -> int:
    """Values in `data` with shared (aliased) parts counted each time they appear, computed once per
    object; a structure that contains itself is refused."""
    sizes: dict[int, int] = {}
    pending: set[int] = set()

    def size(x: Any) -> int:
        if not isinstance(x, (dict, list)):
            return 1
        key = id(x)
        if key in sizes:
            return sizes[key]
        if key in pending:
            raise ConfigError(f"{source}: a YAML alias refers to a value that contains it (a recursive structure)")
        pending.add(key)
        parts = [*x.keys(), *x.values()] if isinstance(x, dict) else x
        total = 1
        for part in parts:
            total += size(part)
            if total > MAX_YAML_VALUES:
                raise ConfigError(f"{source}: the config expands to more than {MAX_YAML_VALUES:,} values through YAML "
                                  "aliases (*name); write the values out or use fewer aliases")  # fmt: skip
        pending.discard(key)
        sizes[key] = total
        return total

    return size(data)


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`["algo=dapo", "rollout.group_size=4"]` -> nested dict; values parsed as YAML scalars/lists."""
    out: dict[str, Any] = {}
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {arg!r} must look like key=value (e.g. rollout.group_size=4)")
        try:
            value = load_yaml(raw, f"override {arg!r}") if raw != "" else ""
        except _NotYaml:
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
        raw = load_yaml(p.read_text(), str(p)) or {}
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
