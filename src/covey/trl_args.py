"""TRL's `GRPOConfig` for covey: the same field names and defaults, mapped onto covey's run config.

    from covey import GRPOConfig, GRPOTrainer        # instead of `from trl import ...`

`GRPOConfig(**fields)` takes every field name of TRL 1.16.0's `GRPOConfig` (its own fields and the
`transformers.TrainingArguments` ones) with TRL's defaults; `GRPOTrainer(args=...)` also takes a
dict of those fields or TRL's own `GRPOConfig` object. `covey_config(args, ...)` maps it:

    TRL field                                    covey key
    num_generations                              rollout.group_size
    per_device_train_batch_size x steps_per_generation (or generation_batch_size) / num_generations
                                                 rollout.prompts_per_step
    steps_per_generation / gradient_accumulation_steps   optim.mini_batches (updates per batch)
    per_device_train_batch_size                  optim.micro_batch_size (memory only)
    num_iterations                               optim.epochs
    max_steps (optimizer steps), else num_train_epochs over the dataset   steps
    max_completion_length                        sampling.max_new_tokens
    temperature, top_p, top_k, min_p (None=0)    sampling.*
    learning_rate, weight_decay, adam_beta1/2, max_grad_norm   optim.lr, weight_decay, betas, grad_clip
    lr_scheduler_type, warmup_steps (< 1: a ratio of max_steps)   optim.schedule, optim.warmup_steps
    beta                                         algo.kl (k3 in the loss; 0 = none)
    epsilon, epsilon_high, delta                 algo.surrogate (ppo_clip eps_low, eps_high, delta)
    loss_type                                    algo.aggregation (+ surrogate for cispo, sapo)
    importance_sampling_level                    algo.surrogate gspo / gspo_token
    scale_rewards                                algo.advantage grpo `scale` (eps 1e-4, TRL's)
    multi_objective_aggregation                  algo.advantage grpo / gdpo
    entropy_coef                                 algo.entropy_coef
    reward_weights                               the reward functions' weights (GRPOTrainer)
    bf16 / fp16, use_cpu, gradient_checkpointing model.dtype, device, model.gradient_checkpointing
    report_to ("wandb", "tensorboard", "none", "all" or a list)   log.report_to (jsonl always)
    save_strategy / save_steps, save_total_limit checkpoint.every, checkpoint.keep
    log_completions / num_completions_to_print   log.completions_every / completions_rows
    seed, output_dir                             seed, the run folder
    use_vllm, vllm_mode, vllm_gpu_memory_utilization, vllm_max_model_length
                                                 engine: {name: vllm, ...} (vLLM in this process; without
                                                 vLLM installed, a one-line ValueError)
    vllm_importance_sampling_correction / _mode / _clip_min / _clip_max (_cap)
                                                 algo.correction: {name: mis, mode, c_min, c_max}

Fields covey cannot honour, decided per field (docs/from-trl.md has the table):
  * `REFUSED` fields set away from TRL's default change the objective or the samples and covey has
    no equivalent (e.g. mask_truncated_completions=True, repetition_penalty, loss_type="vespo"):
    a ValueError naming each.
  * every other field away from its default (logging, hub, distributed, vllm_server_*, ... and
    use_bias_correction_kl with beta > 0) is listed in one warning: covey ignores it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULTS", "FIELDS", "GRPOConfig", "REFUSED", "covey_config"]

# Every init field of trl==1.16.0's GRPOConfig (with transformers 5.23's TrainingArguments).
FIELDS = frozenset("""
accelerator_config activation_checkpointing activation_checkpointing_kwargs adam_beta1 adam_beta2 adam_epsilon
auto_find_batch_size average_tokens_across_devices batch_eval_metrics beta bf16 bf16_full_eval
cache_implementation cast_lm_head_to_fp32 chat_template_kwargs data_seed dataloader_drop_last
dataloader_in_order dataloader_multiprocessing_context dataloader_num_workers dataloader_persistent_workers
dataloader_pin_memory dataloader_prefetch_factor ddp_backend ddp_broadcast_buffers ddp_bucket_cap_mb
ddp_find_unused_parameters ddp_static_graph ddp_timeout debug deepspeed delta disable_dropout disable_tqdm
do_eval do_predict do_train ds3_gather_for_generation enable_jit_checkpoint entropy_coef entropy_coef_delta
entropy_coef_max entropy_coef_min entropy_target epsilon epsilon_high eval_accumulation_steps eval_delay
eval_do_concat_batches eval_on_start eval_steps eval_strategy eval_use_gather_object fp16 fp16_full_eval fsdp
fsdp_config full_determinism generation_batch_size generation_kwargs gradient_accumulation_steps
gradient_checkpointing gradient_checkpointing_kwargs greater_is_better hub_always_push hub_model_id
hub_private_repo hub_revision hub_strategy hub_token ignore_data_skip importance_sampling_level
include_for_metrics include_num_input_tokens_seen label_names label_smoothing_factor learning_rate
length_column_name liger_kernel_config load_best_model_at_end local_rank log_completions
log_completions_hub_repo log_level log_level_replica log_multimodal log_on_each_node log_unique_prompts
logging_first_step logging_nan_inf_filter logging_steps logging_strategy loss_type lr_scheduler_kwargs
lr_scheduler_type mask_truncated_completions max_completion_length max_grad_norm max_steps
max_tool_calling_iterations metric_for_best_model min_p model_init_kwargs multi_objective_aggregation
neftune_noise_alpha num_completions_to_print num_generations num_generations_eval num_iterations
num_train_epochs off_policy_mask_threshold optim optim_args optim_target_modules output_dir pad_to_multiple_of
parallelism_config per_device_eval_batch_size per_device_train_batch_size prediction_loss_only project
push_to_hub ref_model_mixup_alpha ref_model_sync_steps remove_unused_columns repetition_penalty report_to
restore_callback_states_from_checkpoint resume_from_checkpoint reward_weights router_aux_loss_coef run_name
sapo_temperature_neg sapo_temperature_pos save_on_each_node save_only_model save_steps save_strategy
save_total_limit scale_rewards seed shuffle_dataset skip_memory_metrics steps_per_generation sync_ref_model
temperature tf32 top_entropy_quantile top_k top_p torch_compile torch_compile_backend torch_compile_mode
torch_empty_cache_steps trackio_bucket_id trackio_space_id trackio_static_space_id train_sampling_strategy
transformers_continuous_batching_config trust_remote_code use_adaptive_entropy use_bias_correction_kl
use_cache use_cpu use_liger_kernel use_transformers_continuous_batching use_transformers_paged use_vllm
vespo_k_neg vespo_k_pos vespo_lambda_neg vespo_lambda_pos vllm_enable_sleep_mode vllm_gpu_memory_utilization
vllm_group_port vllm_importance_sampling_cap vllm_importance_sampling_clip_max
vllm_importance_sampling_clip_min vllm_importance_sampling_correction vllm_importance_sampling_mode
vllm_max_model_length vllm_mode vllm_model_impl vllm_server_base_url vllm_server_host vllm_server_port
vllm_server_timeout vllm_structured_outputs_regex vllm_tensor_parallel_size warmup_steps weight_decay
""".split())

# TRL 1.16.0's defaults of the fields covey maps or refuses (tests compare them with TRL's dataclass).
DEFAULTS: dict[str, Any] = {
    "output_dir": None, "learning_rate": 1e-6, "lr_scheduler_type": "linear", "lr_scheduler_kwargs": None,
    "warmup_steps": 0, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0, "num_train_epochs": 3.0, "max_steps": -1, "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1, "steps_per_generation": None, "generation_batch_size": None, "seed": 42,
    "bf16": None, "fp16": False, "use_cpu": False, "gradient_checkpointing": True, "report_to": "none",
    "save_strategy": "steps", "save_steps": 500, "save_total_limit": None, "optim": "adamw_torch_fused",
    "num_generations": 8, "max_completion_length": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
    "min_p": None, "repetition_penalty": 1.0, "generation_kwargs": None, "chat_template_kwargs": None,
    "beta": 0.0, "num_iterations": 1, "epsilon": 0.2, "epsilon_high": None, "delta": None,
    "importance_sampling_level": "token", "reward_weights": None, "multi_objective_aggregation": "sum_then_normalize",
    "scale_rewards": "group", "loss_type": "dapo", "mask_truncated_completions": False, "sync_ref_model": False,
    "top_entropy_quantile": 1.0, "entropy_coef": 0.0, "use_adaptive_entropy": False,
    "off_policy_mask_threshold": None, "use_bias_correction_kl": True, "sapo_temperature_neg": 1.05,
    "sapo_temperature_pos": 1.0, "log_completions": False, "num_completions_to_print": None, "logging_steps": 10,
    "neftune_noise_alpha": None, "vllm_structured_outputs_regex": None, "router_aux_loss_coef": None,
    "use_vllm": False, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3, "vllm_max_model_length": None,
    "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_max": 3.0, "vllm_importance_sampling_clip_min": None, "vllm_importance_sampling_cap": None,
}

# Set away from the default, these change the objective or the samples and covey has no equivalent.
REFUSED: dict[str, str] = {
    "fp16": "covey computes in bf16 or fp32 (bf16=True or False)",
    "repetition_penalty": "covey's samplers have no repetition penalty",
    "generation_kwargs": "extra generate() arguments change the samples; map them to covey's sampling keys",
    "chat_template_kwargs": "covey applies the model's chat template without extra arguments",
    "mask_truncated_completions": "covey trains on truncated completions (DAPO's overlong shaping: algo.overlong)",
    "sync_ref_model": "covey's reference model stays the initial policy",
    "top_entropy_quantile": "covey has no high-entropy token mask",
    "use_adaptive_entropy": "covey's entropy bonus has a fixed coefficient (algo.entropy_coef)",
    "off_policy_mask_threshold": "covey has no off-policy sequence mask",
    "lr_scheduler_kwargs": "covey's schedules take no extra arguments",
    "neftune_noise_alpha": "covey adds no embedding noise",
    "vllm_structured_outputs_regex": "covey's engine has no constrained decoding",
    "router_aux_loss_coef": "covey adds no MoE router loss",
    "adam_epsilon": "covey's AdamW uses eps=1e-8",
}
_OPTIMS = ("adamw_torch", "adamw_torch_fused")
_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}
_AGGREGATION = {"grpo": "seq-mean-token-mean", "sapo": "seq-mean-token-mean", "bnpo": "token-mean",
                "dapo": "token-mean", "cispo": "token-mean", "dr_grpo": "seq-mean-token-sum-constant"}
_TRAINING_ONLY = frozenset({"output_dir", "resume_from_checkpoint"})  # read by GRPOTrainer itself, never warned


class GRPOConfig:
    """TRL's `GRPOConfig` (1.16.0) field names and defaults, for `covey.GRPOTrainer(args=...)`.

    Attribute access works as in TRL (``args.num_generations``); an unknown field name is a
    TypeError, like TRL's dataclass. Only the fields given are "set": covey warns about (or refuses)
    the ones it cannot honour, see the module docstring.

    >>> args = GRPOConfig(output_dir="runs/x", num_generations=4, beta=0.04)
    >>> args.num_generations, args.learning_rate, sorted(args.given)
    (4, 1e-06, ['beta', 'num_generations', 'output_dir'])
    """

    def __init__(self, output_dir: str | None = None, **fields: Any):
        unknown = sorted(set(fields) - FIELDS)
        if unknown:
            raise TypeError(f"GRPOConfig got unexpected keyword argument(s) {unknown} (not fields of TRL 1.16's GRPOConfig)")
        self.__dict__.update(DEFAULTS)
        self.__dict__.update(fields)
        self.output_dir = output_dir
        self.given = frozenset(fields) | ({"output_dir"} if output_dir is not None else frozenset())

    def __getattr__(self, name: str):  # a TRL field covey does not map: its default is unknown here
        if name in FIELDS:
            return None
        raise AttributeError(f"GRPOConfig has no field {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """The fields given (what `GRPOTrainer` maps)."""
        return {k: self.__dict__[k] for k in self.given}

    def __repr__(self) -> str:
        return f"GRPOConfig({', '.join(f'{k}={v!r}' for k, v in sorted(self.to_dict().items()))})"


def given_fields(args) -> dict[str, Any]:
    """The fields `args` sets: covey's GRPOConfig (those given), a dict, or TRL's GRPOConfig (every
    mapped field, and the others that differ from a default-built TRL GRPOConfig)."""
    if isinstance(args, GRPOConfig):
        return args.to_dict()
    if isinstance(args, Mapping):
        unknown = sorted(set(args) - FIELDS)
        if unknown:
            raise ValueError(f"args has key(s) {unknown} that are not GRPOConfig fields (TRL 1.16)")
        return dict(args)
    if dataclasses.is_dataclass(args) and type(args).__name__ == "GRPOConfig":  # TRL's own object
        # the mapped fields as TRL resolved them (its __post_init__ fills steps_per_generation from
        # generation_batch_size, bf16 from fp16, ...); the others when they differ from a default object
        out = {k: _plain(getattr(args, k)) for k in DEFAULTS}
        out["generation_batch_size"] = None  # resolved into steps_per_generation
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' deprecation notes for fields we only read
            base = type(args)(output_dir=args.output_dir, use_cpu=args.use_cpu, bf16=args.bf16, fp16=args.fp16)
        for f in dataclasses.fields(args):
            if f.init and f.name not in DEFAULTS and _plain(getattr(args, f.name)) != _plain(getattr(base, f.name)):
                out[f.name] = _plain(getattr(args, f.name))
        return out
    raise TypeError(f"args must be a GRPOConfig (covey's or TRL's) or a dict of its fields, got {type(args).__name__}")


def _plain(v):
    return v.value if isinstance(v, enum.Enum) else v


def covey_config(args, *, n_rows: int | None = None, n_rewards: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(covey config dict, extras) for `args` (see `given_fields`), with TRL's defaults for the rest.

    n_rows: rows in the training dataset (for `num_train_epochs` when max_steps is -1).
    n_rewards: reward functions passed (checks `reward_weights`).
    extras: {"output_dir", "reward_weights", "ignored": [field names]}.
    Raises ValueError for refused fields and impossible batch shapes; warns once listing the
    ignored fields.
    """
    given = given_fields(args)
    a = {**DEFAULTS, **given}
    refused = [f"{k}={given[k]!r} ({why})" for k, why in REFUSED.items()
               if k in given and _plain(given[k]) != DEFAULTS[k] and (given[k] or DEFAULTS[k])]  # {} = None
    if refused:
        raise ValueError("GRPOConfig field(s) covey cannot honour, and ignoring them would change the results: "
                         + "; ".join(refused) + " (docs/from-trl.md)")
    G = int(a["num_generations"])
    per_device = int(a["per_device_train_batch_size"])
    accum = int(a["gradient_accumulation_steps"])
    spg = a["steps_per_generation"]
    if a["generation_batch_size"] is not None:
        rows = int(a["generation_batch_size"])
        if spg is not None:
            raise ValueError("GRPOConfig: set generation_batch_size or steps_per_generation, not both (as in TRL)")
        if rows % per_device:
            raise ValueError(f"GRPOConfig: generation_batch_size={rows} must be a multiple of per_device_train_batch_size={per_device}")
        spg = rows // per_device
    spg = int(spg) if spg is not None else accum
    rows = per_device * spg
    if G < 2 or rows % G:
        raise ValueError(f"GRPOConfig: the generation batch ({rows} = per_device_train_batch_size {per_device} x "
                         f"steps_per_generation {spg}) must be a multiple of num_generations={G} (>= 2), as in TRL")
    if spg % accum:
        raise ValueError(f"GRPOConfig: steps_per_generation={spg} must be a multiple of gradient_accumulation_steps={accum}")
    mini_batches, epochs = spg // accum, int(a["num_iterations"])
    updates_per_step = mini_batches * epochs
    prompts = rows // G
    notes: list[str] = []
    if a["max_steps"] is not None and a["max_steps"] > 0:
        steps = math.ceil(a["max_steps"] / updates_per_step)
        if a["max_steps"] % updates_per_step:
            notes.append(f"max_steps={a['max_steps']} is not a multiple of the {updates_per_step} updates per "
                         f"generated batch: covey runs {steps} batches ({steps * updates_per_step} updates)")
    elif n_rows:
        steps = max(1, math.ceil(float(a["num_train_epochs"]) * max(1, n_rows // prompts)))
    else:
        raise ValueError("GRPOConfig: max_steps=-1 counts num_train_epochs over the train_dataset, whose size is not "
                         "known here (none, or a path): set max_steps")
    warm = a["warmup_steps"] or 0
    total = a["max_steps"] if a["max_steps"] and a["max_steps"] > 0 else steps * updates_per_step
    warm_updates = math.ceil(warm * total) if 0 < warm < 1 else int(warm)  # TRL: < 1 is a ratio of the updates
    schedule = _plain(a["lr_scheduler_type"])
    if schedule not in _SCHEDULES:
        raise ValueError(f"GRPOConfig: lr_scheduler_type={schedule!r} is not one covey has ({', '.join(_SCHEDULES)})")
    if schedule == "constant":
        warm_updates = 0  # TRL's "constant" has no warmup
    optim = _plain(a["optim"])
    if optim not in _OPTIMS:
        raise ValueError(f"GRPOConfig: optim={optim!r} is not AdamW; covey trains with torch AdamW ({', '.join(_OPTIMS)})")
    dtype = "fp32" if a["bf16"] is False else "bf16"
    cfg: dict[str, Any] = {
        "model": {"dtype": dtype, "gradient_checkpointing": bool(a["gradient_checkpointing"])},
        "engine": _engine(a, dtype, notes),  # TRL generates with the training dtype
        "sampling": {"temperature": float(a["temperature"]), "top_p": float(a["top_p"]), "top_k": int(a["top_k"] or 0),
                     "min_p": float(a["min_p"] or 0.0), "max_new_tokens": int(a["max_completion_length"])},
        "rollout": {"prompts_per_step": prompts, "group_size": G},
        "algo": {**_algo(a), **_vllm_correction(a)},
        "optim": {"lr": float(a["learning_rate"]), "weight_decay": float(a["weight_decay"]),
                  "betas": [float(a["adam_beta1"]), float(a["adam_beta2"])], "schedule": _SCHEDULES[schedule],
                  "warmup_steps": math.ceil(warm_updates / updates_per_step), "grad_clip": float(a["max_grad_norm"]),
                  "epochs": epochs, "mini_batches": mini_batches, "micro_batch_size": per_device},
        "log": {"report_to": _report_to(a["report_to"])},
        "checkpoint": _checkpoint(a, steps, updates_per_step),
        "steps": steps,
        "seed": int(a["seed"]),
    }
    if warm_updates % updates_per_step:
        notes.append(f"a warmup of {warm_updates} updates (warmup_steps={warm}) is not a multiple of the "
                     f"{updates_per_step} updates per batch: covey warms up for {cfg['optim']['warmup_steps']} batches")
    if a["use_cpu"]:
        cfg["device"] = "cpu"
    if a["log_completions"]:
        cfg["log"]["completions_every"] = int(a["logging_steps"] or 1)
        if a["num_completions_to_print"]:
            cfg["log"]["completions_rows"] = int(a["num_completions_to_print"])
    weights = a["reward_weights"]
    if weights is not None and len(weights) != n_rewards:
        raise ValueError(f"GRPOConfig: {len(weights)} reward_weights for {n_rewards} reward functions (as in TRL, "
                         "one weight per function)")
    mapped = set(DEFAULTS) | _TRAINING_ONLY
    ignored = sorted(k for k in given if k not in mapped)
    if a["beta"] and a["use_bias_correction_kl"]:
        ignored.append("use_bias_correction_kl (covey's KL term has no importance-ratio factor; same value, different "
                       "gradient)")
    if "eval_strategy" in given and given["eval_strategy"] != "no":
        notes.append("TRL's periodic evaluation is not run and eval_dataset is unused (covey's eval: held-out "
                     "accuracy before/after training, config eval.size with a dataset task that has a verifier)")
    parts = (["covey ignores these GRPOConfig fields: " + ", ".join(ignored)] if ignored else []) + notes
    if parts:
        warnings.warn("; ".join(parts), stacklevel=3)
    return cfg, {"output_dir": a["output_dir"], "reward_weights": weights, "ignored": ignored}


def _algo(a: dict) -> dict[str, Any]:
    """The objective: advantage, surrogate, aggregation, KL and entropy from TRL's loss fields."""
    loss, level = a["loss_type"], _plain(a["importance_sampling_level"])
    eps_low = float(a["epsilon"])
    eps_high = float(a["epsilon_high"]) if a["epsilon_high"] is not None else eps_low
    if loss not in _AGGREGATION:
        raise ValueError(f"GRPOConfig: loss_type={loss!r} has no covey mapping ({', '.join(_AGGREGATION)} do); "
                         "covey's own presets include luspo (algo.preset=luspo)")
    if level not in ("token", "sequence", "sequence_token"):
        raise ValueError(f"GRPOConfig: importance_sampling_level={level!r} is not token, sequence or sequence_token")
    if level != "token" and loss not in ("grpo", "sapo"):
        raise ValueError(f"GRPOConfig: importance_sampling_level={level!r} with loss_type={loss!r} (TRL refuses this too)")
    if loss == "cispo":  # TRL: w = sg(clamp(r, max=epsilon_high)), no lower bound
        surrogate = {"name": "cispo", "eps_low": None, "eps_high": eps_high, "cap_mode": "absolute"}
    elif loss == "sapo":
        surrogate = {"name": "sapo", "tau_pos": float(a["sapo_temperature_pos"]), "tau_neg": float(a["sapo_temperature_neg"])}
    elif level != "token":
        surrogate = {"name": "gspo" if level == "sequence" else "gspo_token", "eps_low": eps_low, "eps_high": eps_high}
    else:
        surrogate = {"name": "ppo_clip", "eps_low": eps_low, "eps_high": eps_high, "delta": a["delta"],
                     "log_ratio_clamp": None}  # TRL clamps no log-ratio
    if a["delta"] is not None and surrogate["name"] != "ppo_clip":
        raise ValueError(f"GRPOConfig: delta is TRL's two-sided clip of the token ratio; covey has it for loss_type "
                         f"grpo/dapo/bnpo/dr_grpo at token level, not {loss!r}/{level!r}")
    scale = {True: "group", False: "none"}.get(a["scale_rewards"], a["scale_rewards"])
    agg_mode = a["multi_objective_aggregation"]
    if agg_mode == "sum_then_normalize":
        if scale not in ("group", "batch", "none"):
            raise ValueError(f"GRPOConfig: scale_rewards={a['scale_rewards']!r} is not group, batch or none")
        advantage = {"name": "grpo", "eps": 1e-4, "scale": scale}
    elif agg_mode == "normalize_then_sum":
        advantage = {"name": "gdpo", "eps": 1e-4, "whiten_by": "sequence"}
    else:
        raise ValueError(f"GRPOConfig: multi_objective_aggregation={agg_mode!r} is not sum_then_normalize or normalize_then_sum")
    beta = float(a["beta"])
    return {
        "preset": None,
        "advantage": advantage,
        "surrogate": surrogate,
        "aggregation": {"name": _AGGREGATION[loss]},  # dr_grpo: constant = max_new_tokens = max_completion_length
        "kl": {"name": "k3", "coef": beta, "mode": "loss"} if beta else None,
        "entropy_coef": float(a["entropy_coef"]),
    }


def _engine(a: dict, dtype: str, notes: list[str]) -> dict[str, Any]:
    """The engine: TRL's `model.generate` is covey's torch engine; `use_vllm=True` is covey's vllm engine (vLLM in
    this process, as TRL's `vllm_mode="colocate"`), refused in one line when vLLM is not installed."""
    if not a["use_vllm"]:
        return {"name": "torch", "dtype": dtype}
    from covey.engine.vllm_engine import INSTALL_HINT, vllm_available

    if not vllm_available():
        raise ValueError(f"GRPOConfig: use_vllm=True needs vLLM, which is not installed here: {INSTALL_HINT} "
                         "(or use_vllm=False: covey's own engine)")  # fmt: skip
    if _plain(a["vllm_mode"]) == "server":
        notes.append("vllm_mode='server': covey runs vLLM in the training process (as vllm_mode='colocate'); the "
                     "vllm_server_* settings are not used")  # fmt: skip
    engine: dict[str, Any] = {"name": "vllm", "dtype": dtype, "gpu_memory_utilization": float(a["vllm_gpu_memory_utilization"])}
    if a["vllm_max_model_length"]:
        engine["max_model_len"] = int(a["vllm_max_model_length"])
    return engine


def _vllm_correction(a: dict) -> dict[str, Any]:
    """TRL corrects vLLM's sampling log-probs against the trainer's by importance sampling when use_vllm and
    vllm_importance_sampling_correction (its default): covey's `mis` correction has the same modes and bounds."""
    if not (a["use_vllm"] and a["vllm_importance_sampling_correction"]):
        return {}
    c_max = a["vllm_importance_sampling_cap"] if a["vllm_importance_sampling_cap"] is not None else a["vllm_importance_sampling_clip_max"]
    if c_max is None:
        raise ValueError("GRPOConfig: vllm_importance_sampling_clip_max=None (no upper bound) is not mapped; covey's mis "
                         "correction needs c_max")  # fmt: skip
    correction = {"name": "mis", "mode": _plain(a["vllm_importance_sampling_mode"]), "c_max": float(c_max)}
    if a["vllm_importance_sampling_clip_min"] is not None:
        correction["c_min"] = float(a["vllm_importance_sampling_clip_min"])
    return {"correction": correction}


def _report_to(value) -> list[str]:
    sinks = [value] if isinstance(value, str) else list(value or [])
    out = ["jsonl"]
    for s in sinks:
        if s == "all":
            out += ["tensorboard", "wandb"]
        elif s in ("tensorboard", "wandb") and s not in out:
            out.append(s)
        elif s not in ("none", "jsonl"):
            warnings.warn(f"covey ignores report_to={s!r} (it writes metrics.jsonl, tensorboard and wandb)", stacklevel=4)
    return out


def _checkpoint(a: dict, steps: int, updates_per_step: int) -> dict[str, Any]:
    strategy, save = _plain(a["save_strategy"]), a["save_steps"] or 0
    save = save * steps * updates_per_step if 0 < save < 1 else save  # TRL: < 1 is a ratio of the updates
    every = math.ceil(save / updates_per_step) if strategy == "steps" else 0
    keep = int(a["save_total_limit"]) if a["save_total_limit"] else max(1, steps)  # TRL: None keeps all
    return {"every": every, "keep": max(1, keep)}
