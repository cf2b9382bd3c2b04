"""Building the pieces a run needs from its config: policy (+LoRA), reference, rewards, the learner's
objective. The optimizer is `covey.learner.optim`; the model-state helpers are `covey.models.state`."""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

from covey.models import load as load_model
from covey.models.state import engine_model, trainable_state
from covey.tasks.base import hooks_of
from covey.train.config import ModelConfig, RunConfig

__all__ = ["Reference", "build_objective", "build_reference", "build_rewards", "check_run", "load_policy", "load_run_policy"]


def load_policy(cfg: ModelConfig, *, model=None, tokenizer=None, device: str | torch.device = "cpu"):
    """(model, tokenizer) on `device`: fp32 weights (the learner autocasts), LoRA-wrapped when configured.

    `model` (an HF `PreTrainedModel`) and `tokenizer` may be given as objects; otherwise they are
    loaded from `cfg.name`. A given model without a tokenizer gets the one saved with `cfg.name`.
    """
    from covey.models.vision import as_vision_tokenizer, is_vision_model, vision_module_names, vision_parameters

    if model is None:
        model, loaded_tok = load_model(cfg.name, trust_remote_code=cfg.trust_remote_code)
        tokenizer = tokenizer or loaded_tok
    elif tokenizer is None:
        from transformers import AutoProcessor, AutoTokenizer

        source = getattr(model, "name_or_path", "") or cfg.name
        auto = AutoProcessor if is_vision_model(model) else AutoTokenizer
        try:
            tokenizer = auto.from_pretrained(source, local_files_only=True)
        except OSError as e:
            raise ValueError(f"a model object was given without a tokenizer and none could be loaded from {source!r}: "
                             "pass tokenizer=...") from e  # fmt: skip
    vision = is_vision_model(model)
    if vision:  # docs/vlm.md: the processor renders prompts with images
        tokenizer = as_vision_tokenizer(tokenizer)
    model.float().to(device)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    frozen = vision and cfg.freeze_vision
    for _, p in vision_parameters(model) if frozen else ():
        p.requires_grad_(False)  # the vision tower and projector stay as loaded
    if cfg.lora is not None:
        from peft import LoraConfig, get_peft_model

        lc = cfg.lora
        extra = {"exclude_modules": vision_module_names(model)} if frozen else {}  # adapters on the language tower only
        model = get_peft_model(
            model, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=lc.target_modules, **extra)
        )
    model.eval()  # dropout off while sampling; the learner switches to train() for updates
    return model, tokenizer


class Reference:
    """The frozen reference policy for KL terms: the LoRA base (adapters off) or a frozen copy."""

    def __init__(self, policy: torch.nn.Module, lora: bool):
        self._policy = policy
        self._copy = None if lora else copy.deepcopy(policy).requires_grad_(False).eval()

    def engine_model(self) -> torch.nn.Module:
        """A plain model for an engine that samples from the reference: the frozen copy, or with LoRA
        a copy of the base model with the adapters removed unmerged (peft `unload`)."""
        if self._copy is not None:
            return self._copy
        return copy.deepcopy(self._policy).unload().requires_grad_(False).eval()

    @contextmanager
    def active(self):
        if self._copy is not None:
            yield self._copy
        else:
            with self._policy.disable_adapter():
                yield self._policy

    def reset_to_policy(self) -> None:
        """pi_ref <- pi_theta: copy the policy's weights into the frozen copy (`algo.reference_reset`)."""
        if self._copy is None:
            raise ValueError("a reference reset needs a full reference copy; with LoRA the reference is the base model")
        self._copy.load_state_dict(self._policy.state_dict())

    def state_dict(self) -> dict:
        return {} if self._copy is None else self._copy.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self._copy is not None and state:
            self._copy.load_state_dict(state)


def build_reference(policy: torch.nn.Module, cfg: ModelConfig) -> Reference:
    return Reference(policy, lora=cfg.lora is not None)


def build_objective(cfg: RunConfig, policy: torch.nn.Module, device):
    """The loss the learner's update trains (`covey.learner.objective`): the preference loss on pairs in
    preference mode, `algo.objective` when set (`OBJECTIVES`), nothing when the rollout strategy learns
    without gradients (``StrategyCaps(updates_policy=False)``), else the policy-gradient loss of the axes."""
    if cfg.algo.objective is not None:
        import covey.objectives  # noqa: F401  (registers the built-in objectives)
        from covey.learner.objective import OBJECTIVES

        return OBJECTIVES.build(cfg.algo.objective.name, cfg.algo.objective.params, cfg, policy, device)
    from covey.strategies.base import strategy_chain

    spec = cfg.strategy_spec()
    if not all(entry.caps.updates_policy for _, _, entry in strategy_chain(spec.name, spec.params)):
        from covey.learner.objective import FrozenPolicy

        return FrozenPolicy()
    if cfg.preference is not None:
        from covey.preference.objective import PreferenceLoss, load_guide

        return PreferenceLoss(cfg.preference, load_guide(cfg.preference, policy, device))
    from covey.learner.policy_loss import PolicyLoss

    return PolicyLoss(cfg.algo, max_new_tokens=cfg.sampling.max_new_tokens, skip_zero_advantage=cfg.optim.skip_zero_advantage)


def build_rewards(cfg: RunConfig, task, reward_funcs: list | None = None, workers: int | None = None):
    """The reward runner: the task's verifier as column `accuracy` (when the task has one), the
    configured rewards, then `reward_funcs` (callables or import paths, from the Python API)."""
    from covey.rewards import RewardRunner, RewardSpec

    from covey.strategies import STRATEGIES

    label = STRATEGIES.get(cfg.rollout.strategy.name).caps.labelled_reward
    if label is not None:  # the dataset labels the rows (preference pairs): that is the only reward
        return RewardRunner([{"name": label}], workers=0)
    rewards: list = []
    verifier = hooks_of(task).reward
    if verifier is not None:
        spec = RewardSpec(name="accuracy", weight=cfg.task_reward_weight, timeout_s=cfg.task_reward_timeout_s)
        rewards.append((verifier, spec))
    rewards += [r.model_dump() for r in cfg.rewards]
    for fn in reward_funcs or []:
        rewards.append({"name": fn} if isinstance(fn, str) else fn)
    if not rewards:
        raise ValueError(f"task {cfg.task.name!r} has no verifier and no rewards are configured: add `rewards:` to the config "
                         "(e.g. rewards: [{name: my_module:my_reward}])")  # fmt: skip
    if workers is None:  # executor ray with runtime.reward_workers: that many reward actors (covey.runtime.ray_rewards)
        workers = cfg.runtime.reward_workers or cfg.reward_workers
    return RewardRunner(rewards, workers=workers)


def check_run(cfg: RunConfig, task=None, reward_funcs: list | None = None):
    """Everything that can be checked without loading the model: the task builds and has data, the
    rewards resolve with their parameters, group-relative estimators get groups. Returns the task.
    `covey config show` and the trainer both call it, so both accept exactly the same configs."""
    import logging

    from covey.algos import ADVANTAGES
    from covey.algos.hooks import check_hooks
    from covey.rewards.registry import reward_caps
    from covey.tasks import get_task

    if task is None:
        task = get_task(cfg.task.name, **cfg.task.params)
        task.examples(cfg.task.split)  # data files exist and parse
        if cfg.eval.size:
            task.examples(cfg.task.eval_split)
    from covey.family import check_data_family

    check_data_family(cfg.model.family, task.examples(cfg.task.split), cfg.task.split)  # images need a vision-language model
    runner = build_rewards(cfg, task, reward_funcs, workers=0)  # names, import paths and params resolve
    advantage = ADVANTAGES.get(cfg.algo.advantage.name)
    try:
        check_reward_columns(runner.entries, task.examples(cfg.task.split), cfg.task.split)
        for e in runner.entries:  # a reward tied to an advantage estimator checks it
            check = reward_caps(e.fn).check_advantage
            if check is not None:
                check(advantage.name, {**advantage.defaults, **cfg.algo.advantage.params})
    finally:
        runner.close()
    if "wandb" in cfg.log.report_to:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ValueError("log.report_to has wandb but the wandb package is not installed: pip install wandb, "
                             "or remove it from log.report_to")  # fmt: skip
    check_hooks(cfg)  # each step hook's own refusals (algo.reference_reset x model.lora)
    singleton = {**advantage.defaults, **cfg.algo.advantage.params}.get("singleton", "zero")
    if cfg.preference is None and advantage.group_relative and singleton != "raw" and cfg.rollout.group_size + cfg.algo.group_size_extra < 2:
        logging.getLogger("covey").warning(
            "rollout.group_size=1 with the group-relative estimator %r: every advantage is zero, nothing will be "
            "learned; use group_size >= 2", advantage.name)  # fmt: skip
    return task


SCORER_COLUMNS = frozenset({"prompts", "completions", "group", "completion_ids", "completion_length"})
"""Arguments every reward call gets whatever the dataset holds (`covey.rewards.scoring`)."""


def check_reward_columns(entries, rows: list[dict], split: str) -> None:
    """Each column a reward names as a parameter is in every row of the split, or (for a parameter
    with a default) in none: a column missing from some rows would reach the reward as None there,
    and a required one missing from all would stop the run at its first step."""
    for entry in entries:
        for name in sorted(entry.reads - SCORER_COLUMNS - {"id", "prompt"}):
            missing = [i for i, row in enumerate(rows, 1) if name not in row]
            if not missing or (len(missing) == len(rows) and name not in entry.required):
                continue
            if len(missing) == len(rows):
                raise ValueError(f"reward {entry.label!r} reads column {name!r}, which no row of the {split} split has "
                                 "(add it to the dataset, or give the parameter a default)")  # fmt: skip
            shown = ", ".join(map(str, missing[:10])) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise ValueError(f"reward {entry.label!r} reads column {name!r}, missing in row{'s' if len(missing) > 1 else ''} "
                             f"{shown} of the {split} split ({len(rows)} rows): every row needs it")  # fmt: skip


def load_run_policy(run_dir, *, merge: bool = True):
    """(model, tokenizer) of a training run: its config's model with the latest checkpoint's weights.

    LoRA runs come back merged into a plain HF model (what engines and `covey eval` need), or as the
    peft model with `merge=False` (for exporting the adapter)."""
    from pathlib import Path

    from covey.train.checkpoint import load_latest_checkpoint, load_weights
    from covey.train.config import load_config

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a covey run folder (no config.yaml)")
    cfg = load_config(run_dir / "config.yaml")
    found = load_latest_checkpoint(run_dir, map_location="cpu")
    if found is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet")
    ckpt, payload, _ = found
    model, tok = load_policy(cfg.model)
    load_weights(model, ckpt, payload)  # a plain checkpoint's weights, or the fsdp2 learner's shards (no process group)
    return (engine_model(model) if merge else model), tok
