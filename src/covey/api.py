"""The Python API: covey's trainer with TRL's calling convention.

    from covey import GRPOTrainer

    trainer = GRPOTrainer(
        model="smollm2-135m-instruct",          # alias, folder, hub id in the local cache, or a PreTrainedModel
        reward_funcs=[my_reward, "pkg.mod:fn"], # callables (closures and __main__ functions too) or import paths
        train_dataset=rows,                      # datasets.Dataset, list of dicts, or a file/folder path
        config={"algo": "dapo", "steps": 50},    # dict of covey config keys, a RunConfig, or a YAML path
    )
    metrics = trainer.train()                    # the last step's metrics plus the run summary
    trainer.close()                              # frees reward workers (also on `with GRPOTrainer(...)`)

Everything the CLI does (checkpoints, Ctrl-C/SIGTERM saves, metrics.jsonl, TensorBoard, plots,
`final/` export) happens the same way: `train()` runs the same loop as `covey train`. The dataset
goes through the built-in `dataset` task: string or chat-message prompts under `prompt_key`, every
other column reaches the reward functions as a keyword argument, and a column `answer_key`
(default "answer") also turns on the final-answer verifier (reward column `accuracy`).

Reward callables that a worker process cannot import (closures, lambdas, functions defined in
`__main__`) run in the calling process; worker processes never re-run your script.

TRL scripts run with only the import changed (docs/from-trl.md):

    from covey import GRPOConfig, GRPOTrainer           # was: from trl import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model="Qwen/Qwen2-0.5B-Instruct", reward_funcs=[reward_len, "my/reward-model"],
                          args=GRPOConfig(output_dir="out", num_generations=8, max_steps=100),
                          train_dataset=dataset, processing_class=tokenizer, peft_config=LoraConfig(r=16))
    trainer.train(resume_from_checkpoint=True)

`args` (covey's `GRPOConfig`, TRL's, or a dict of TRL's fields) is mapped by `covey.trl_args`;
`config` may still add covey keys on top. A string reward that is neither an import path
(``module:function``) nor a covey reward name is a reward model (TRL's convention), as is a
model object.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from covey.tasks.base import hooks_of
from covey.train.config import RunConfig, apply_overrides, load_config, validate_config
from covey.train.provenance import record_python_only

__all__ = ["GRPOTrainer"]

# TRL GRPOTrainer arguments covey has no equivalent for: passing one is an error, not a silent no-op.
_UNSUPPORTED = {
    "callbacks": "covey's loop has no TrainerCallback hooks",
    "optimizers": "covey builds its own AdamW and schedule (args: learning_rate, lr_scheduler_type, ...)",
    "quantization_config": "covey trains full-precision or LoRA weights",
    "tools": "covey's rollouts have no tool calls",
    "rollout_func": "use a covey rollout strategy (rollout.strategy)",
    "environment_factory": "covey's rollouts have no environments",
}


class GRPOTrainer:
    """Build a run from objects and train it (see the module docstring). Arguments in TRL's order:

    model:          alias / folder / hub id (str), or an HF `PreTrainedModel` (then also pass
                    `processing_class`, or keep the one saved with the model's `name_or_path`).
    reward_funcs:   a callable or import path, or a list of them; TRL's signature
                    `fn(prompts, completions, **columns) -> list[float | None]` (``async def`` too);
                    a reward model (a loaded sequence-classification model, or a model id/folder).
    args:           TRL's training arguments: `covey.GRPOConfig`, TRL's `GRPOConfig`, or a dict of
                    its fields (`covey.trl_args` maps them; unmappable ones warn or fail).
    train_dataset:  `datasets.Dataset` (a `DatasetDict`: its "train" split), list of dicts, or a
                    path (.jsonl, .parquet, save_to_disk folder); None keeps the config's task.
    eval_dataset:   the same, for the held-out accuracy before/after training (needs `answer_key`).
    processing_class: the policy's tokenizer (alias: `tokenizer`).
    reward_processing_classes: tokenizers of the reward models, one per reward function (None elsewhere).
    peft_config:    a peft `LoraConfig`: LoRA training (r, lora_alpha, lora_dropout, target_modules).
    config:         dict of covey config keys (`covey config show` lists them), a `RunConfig`, or a
                    YAML path; applied on top of `args`.
    run_dir:        where checkpoints, metrics and `final/` go (default: args.output_dir, else log.dir/log.name).
    dataset_params: extra parameters of the `dataset` task (prompt_key, system_prompt, answer_key, ...).

    With `args` the run follows TRL: its defaults (e.g. beta=0, loss_type="dapo", learning_rate 1e-6),
    and no extra verifier column (`answer` is a plain column unless dataset_params say verifier="math").
    """

    def __init__(
        self,
        model: Any = None,
        reward_funcs: Any = None,
        args: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Any = None,
        optimizers: Any = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        tools: Any = None,
        rollout_func: Any = None,
        environment_factory: Any = None,
        *,
        config: dict | RunConfig | str | os.PathLike | None = None,
        tokenizer: Any = None,
        run_dir: str | os.PathLike | None = None,
        **dataset_params: Any,
    ):
        from covey.train.run import default_run_dir
        from covey.trl_args import covey_config

        given = {"callbacks": callbacks, "optimizers": None if optimizers == (None, None) else optimizers,
                 "quantization_config": quantization_config, "tools": tools, "rollout_func": rollout_func,
                 "environment_factory": environment_factory}  # fmt: skip
        bad = [f"{k} ({why})" for k, why in _UNSUPPORTED.items() if given[k]]
        if bad:
            raise ValueError("GRPOTrainer argument(s) covey does not support: " + "; ".join(bad))
        if processing_class is not None and tokenizer is not None and processing_class is not tokenizer:
            raise ValueError("pass the tokenizer once: processing_class or tokenizer")
        tokenizer = processing_class if processing_class is not None else tokenizer
        funcs = [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        train_dataset, eval_dataset = _split(train_dataset, "train_dataset", ("train",)), _split(
            eval_dataset, "eval_dataset", ("test", "validation", "eval"))
        raw: dict[str, Any] = {}
        weights, user_params = None, bool(dataset_params)
        if args is not None:
            rows = len(train_dataset) if train_dataset is not None and hasattr(train_dataset, "__len__") and not isinstance(
                train_dataset, (str, os.PathLike)) else None  # fmt: skip
            raw, extras = covey_config(args, n_rows=rows, n_rewards=len(funcs))
            weights = extras["reward_weights"]
            if run_dir is None and extras["output_dir"]:
                run_dir = extras["output_dir"]
            dataset_params = {"verifier": "none", **dataset_params}  # TRL adds no reward of its own
            eval_dataset = None  # TRL's periodic evaluation is not run (covey_config warns when it was asked for)
        if args is not None and config is not None and not isinstance(config, dict):
            raise ValueError("with args, config may only be a dict of covey keys to apply on top (a RunConfig or YAML "
                             "file sets every key and would undo args)")
        raw = apply_overrides(raw, _raw_config(config))
        if peft_config is not None:
            raw = apply_overrides(raw, {"model": {"lora": _lora(peft_config)}})
        if isinstance(model, (str, os.PathLike)):
            raw = apply_overrides(raw, {"model": {"name": _model_name(model)}})
        if "family" not in raw.get("model", {}) and _is_vision(model, raw):  # TRL loads a VLM from what it is
            raw = apply_overrides(raw, {"model": {"family": "vision_language"}})
        task = None
        if train_dataset is not None:
            task, task_cfg = _dataset_task(train_dataset, eval_dataset, dataset_params)
            kept = {k: v for k, v in raw.get("task", {}).items() if k in ("split", "eval_split", "on_long_prompt")}  # not the old task's params
            raw = {**raw, "task": {**kept, **task_cfg}}
            if eval_dataset is not None and hooks_of(task).reward is None:
                raise ValueError(f"eval_dataset is scored with the final-answer check, which needs an "
                                 f"{dataset_params.get('answer_key', 'answer')!r} column (answer_key) in the rows (and "
                                 "verifier not none); add one, or leave eval_dataset out")  # fmt: skip
            if eval_dataset is not None and not raw.get("eval", {}).get("size"):
                raw = apply_overrides(raw, {"eval": {"size": len(task.examples("test"))}})
        elif eval_dataset is not None or user_params:
            raise ValueError("eval_dataset and dataset parameters need a train_dataset")
        self.config = validate_config(raw, source="GRPOTrainer config")
        if self.config.eval.size and task is not None and hooks_of(task).reward is None:
            raise ValueError(f"eval.size={self.config.eval.size} needs a verifier: give the dataset an "
                             f"{dataset_params.get('answer_key', 'answer')!r} column or set eval.size=0")  # fmt: skip
        self.reward_funcs = _rewards(funcs, weights, reward_processing_classes)
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(self.config)
        self._had_run = (self.run_dir / "metrics.jsonl").exists()  # refused at train() unless it resumes
        # What `covey train --resume` / `covey eval --run` need to rebuild the run (covey.api._for_cli):
        # in-memory rows go to RUN/data/*.jsonl, importable reward functions become config rewards.
        self.config, cli_rewards, rows_to_write, self._python_only = _for_cli(self.config, self.reward_funcs, train_dataset,
                                                                              eval_dataset, self.run_dir, model)  # fmt: skip
        self._build = dict(task=task, reward_funcs=None if cli_rewards else self.reward_funcs, tokenizer=tokenizer,
                           model=None if isinstance(model, (str, os.PathLike)) else model)  # fmt: skip
        self.trainer = self._new_trainer(resume=False)
        try:
            _write_rows(rows_to_write)
            record_python_only(self.run_dir, self._python_only)
        except BaseException:
            self.trainer.close()
            raise
        self.summary: dict[str, Any] = {}

    def _new_trainer(self, resume: bool):
        from covey.train.trainer import Trainer

        trainer = Trainer(self.config, self.run_dir, resume=resume, **self._build)
        self.model, self.tokenizer = trainer.model, trainer.tokenizer
        self.processing_class = getattr(trainer.tokenizer, "processor", trainer.tokenizer)  # a VLM's: its AutoProcessor
        return trainer

    def train(self, resume_from_checkpoint: bool | str | os.PathLike | None = None) -> dict[str, Any]:
        """Train for `config.steps` steps; returns the last step's metrics merged with the run
        summary (run_dir, checkpoint, eval_before/eval_after when evaluated, plots).

        resume_from_checkpoint: True, or the run folder / its latest checkpoint: continue that run
        (TRL's argument; covey resumes from the folder's latest checkpoint, as `covey train --resume`)."""
        from covey.train.run import train

        if resume_from_checkpoint:
            self._check_resume_target(resume_from_checkpoint)
            if self._build["model"] is not None and self.config.model.lora is not None:
                raise ValueError("resuming a LoRA run given as a model object is not supported (the object already "
                                 "carries this trainer's adapters): pass the model by name or folder")
            self.trainer.close()
            self.trainer = self._new_trainer(resume=True)
        elif self._had_run and self.trainer.step_num == 0:
            raise FileExistsError(f"{self.run_dir} already holds a run: pass train(resume_from_checkpoint=True) to "
                                  "continue it, or another output_dir / run_dir")  # fmt: skip
        from covey.train.interrupt import TrainingInterrupted

        try:
            self.summary = train(self.config, self.run_dir, trainer=self.trainer)
        except TrainingInterrupted as e:  # saved; raised on as TRL lets Ctrl-C through
            self.summary, self._had_run = e.summary, True
            raise
        self._had_run = True
        return {**self.trainer.last_metrics, **self.summary}

    def _check_resume_target(self, target) -> None:
        from covey.train.checkpoint import latest_checkpoint

        latest = latest_checkpoint(self.run_dir)
        if latest is None:
            raise FileNotFoundError(f"{self.run_dir} has no checkpoint to resume from")
        if target is True:
            return
        p = Path(target).resolve()
        if p not in (self.run_dir.resolve(), Path(latest).resolve()):
            raise ValueError(f"resume_from_checkpoint={str(target)!r}: covey resumes the run in {self.run_dir} from its "
                             f"latest checkpoint {latest}; pass True, the run folder or that checkpoint")  # fmt: skip

    def step(self) -> dict[str, Any]:
        """One training step (no progress bar, no end-of-run save); returns its metrics."""
        if self._had_run and self.trainer.step_num == 0:
            raise FileExistsError(f"{self.run_dir} already holds a run: use train(resume_from_checkpoint=True), or "
                                  "another output_dir / run_dir")  # fmt: skip
        return self.trainer.step()

    def save_model(self, path: str | os.PathLike | None = None, *, merge: bool = False) -> Path:
        """Save the current policy with its tokenizer, as TRL / peft do: a full model as a `save_pretrained`
        folder; a LoRA policy as its peft adapter (adapter_config.json + adapter_model.safetensors, base model
        recorded by its hub id where there is one). `merge=True` writes the adapter merged into the base weights
        instead. `path`: default the run folder's final/ (adapter/ for an unmerged LoRA policy)."""
        from covey.models.state import engine_model
        from covey.train.export import portable_base, quiet_progress

        model = self.trainer.model
        lora = hasattr(model, "get_base_model")
        path = Path(path) if path is not None else self.run_dir / ("adapter" if lora and not merge else "final")
        if lora and merge:
            model = engine_model(model)  # a merged copy; the trained adapters stay as they are
        with quiet_progress():
            model.save_pretrained(path)
        self.trainer.tokenizer.save_pretrained(path)
        portable_base(path / "adapter_config.json")
        return path

    @property
    def state(self):
        """`transformers.TrainerState` of the run so far: global_step (covey steps), max_steps, epoch and
        log_history (every logged step with covey's metric names and TRL's: `covey.train.trl_names`)."""
        from transformers.trainer_callback import TrainerState

        from covey.train.metrics import read_metrics
        from covey.train.trl_names import trainer_state

        path = self.run_dir / "metrics.jsonl"
        rows = read_metrics(path) if path.is_file() else []
        cfg, items = self.config, getattr(self.trainer, "n_items", 0)
        return TrainerState(**trainer_state(self.trainer.step_num, cfg.steps, rows, save_steps=cfg.checkpoint.every,
                                            batch_rows=cfg.rollout.prompts_per_step * cfg.rollout.group_size,
                                            steps_per_epoch=items / cfg.rollout.prompts_per_step if items else None))  # fmt: skip

    def evaluate(self, eval_dataset: Any = None, *, max_new_tokens: int | None = None, n: int = 1,
                 temperature: float = 0.0) -> dict[str, float]:  # fmt: skip
        """Held-out accuracy of the current policy, greedy by default, as `covey eval` measures it: on
        `eval_dataset` (rows with the answer column), else the run's held-out split (its eval_dataset or the
        task's test split). Returns TRL-style keys: `eval_accuracy`, `eval_pass@1`, ..., `eval_samples`.
        Works before, during and after `train()` (it builds its own engine over the current weights)."""
        import torch

        from covey.engine import TorchEngine
        from covey.eval.runner import evaluate
        from covey.models.state import engine_model
        from covey.tasks.base import hooks_of

        task = self.trainer.task
        if eval_dataset is not None:
            from covey.tasks.dataset import DatasetTask

            params = {k: v for k, v in self.config.task.params.items() if k in ("prompt_key", "system_prompt", "answer_key")}
            task = DatasetTask(rows=_split(eval_dataset, "eval_dataset", ("test", "validation", "eval")), verifier="math", **params)
            items = list(task.examples("train"))
        elif not task.has_split(self.config.task.eval_split) if hasattr(task, "has_split") else False:
            raise ValueError("evaluate(): the run has no held-out data; pass eval_dataset=rows (with an answer column)")
        else:
            items = list(task.examples(self.config.task.eval_split))[: self.config.eval.size or None]
        if hooks_of(task).reward is None:
            raise ValueError("evaluate() scores with the final-answer check, which needs an answer column (answer_key) in the rows")
        model = self.trainer.model
        source = engine_model(model) if hasattr(model, "get_base_model") else model
        engine = TorchEngine(source, dtype=self.trainer.learner.dtype, tokenizer=self.trainer.tokenizer)
        with torch.no_grad():
            res = evaluate(engine, self.trainer.tokenizer, task, items, n=n, temperature=temperature,
                           max_new_tokens=max_new_tokens or self.config.eval.max_new_tokens or self.config.sampling.max_new_tokens)  # fmt: skip
        engine.close()
        return {"eval_samples": len(items), **{f"eval_{k}": v for k, v in res.items() if isinstance(v, (int, float))}}

    def push_to_hub(self, repo_id: str | None = None, *, commit_message: str = "covey: trained policy", private: bool | None = None,
                    merge: bool = False, token: str | None = None) -> str:  # fmt: skip
        """Upload the policy (`save_model`: a LoRA adapter, or with `merge` the merged model) to the Hugging Face
        Hub as `repo_id` (default: the run folder's name), creating the repository when needed; returns its URL.
        Offline, or with the hub unreachable, one ValueError line says so before anything is written."""
        import tempfile

        from covey.models.loading import hub_reachable

        if not hub_reachable(timeout=3.0):
            raise ValueError("push_to_hub: the Hugging Face Hub is not reachable from here (offline, HF_HUB_OFFLINE=1, or no "
                             f"network); the policy is saved locally with save_model() (run folder {self.run_dir})")  # fmt: skip
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        repo = repo_id or self.run_dir.name
        url = api.create_repo(repo, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="covey-push-") as folder:
            self.save_model(folder, merge=merge)
            api.upload_folder(repo_id=getattr(url, "repo_id", repo), folder_path=folder, commit_message=commit_message)
        return str(url)

    def close(self) -> None:
        """Free reward workers, the engine's buffers and open metric files."""
        self.trainer.close()

    def __enter__(self) -> "GRPOTrainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _split(data, what: str, names: tuple[str, ...]):
    """A `DatasetDict` (or a dict of datasets) becomes its split named first in `names` (TRL takes
    the split you index; covey picks "train" for training and test/validation/eval for evaluation)."""
    if data is None or isinstance(data, (str, os.PathLike, list)) or not hasattr(data, "keys"):
        return data
    for name in names:
        if name in data:
            return data[name]
    raise ValueError(f"{what} is a DatasetDict with splits {sorted(data.keys())}; covey takes {' or '.join(names)}: "
                     f"pass {what}=ds[<split>]")


def _lora(peft_config) -> dict[str, Any]:
    """covey's model.lora from a peft `LoraConfig` (a dict of its fields works too); settings covey's
    LoRA does not have are an error, since dropping them would change what is trained."""
    get = peft_config.get if isinstance(peft_config, dict) else lambda k, d=None: getattr(peft_config, k, d)
    if type(peft_config).__name__ not in ("LoraConfig", "dict"):
        raise ValueError(f"peft_config must be a peft LoraConfig, got {type(peft_config).__name__}")
    target = get("target_modules")
    if target is None:
        raise ValueError("peft_config.target_modules=None (peft's per-architecture default) is not mapped: name them, "
                         "e.g. 'all-linear' or ['q_proj', 'v_proj']")
    checks = {"bias": "none", "use_rslora": False, "use_dora": False, "modules_to_save": None, "layers_to_transform": None,
              "rank_pattern": {}, "alpha_pattern": {}, "init_lora_weights": True, "exclude_modules": None}
    bad = [f"{k}={get(k)!r}" for k, default in checks.items() if get(k, default) not in (default, None, {}) or
           (k == "init_lora_weights" and get(k, True) is not True)]  # fmt: skip
    if bad:
        raise ValueError(f"peft_config settings covey's LoRA does not have: {', '.join(bad)}")
    return {"r": int(get("r", 8)), "alpha": float(get("lora_alpha", 8)), "dropout": float(get("lora_dropout", 0.0)),
            "target_modules": target if isinstance(target, str) else sorted(target)}


def _rewards(funcs: list, weights, processing_classes) -> list:
    """The reward list for the runner: TRL's reward_weights, reward models (model objects, and strings
    that are neither import paths nor covey reward names) with their tokenizers."""
    from covey.rewards import REWARDS, ModelReward, RewardSpec
    from covey.rewards.model import is_reward_model

    n = len(funcs)
    if processing_classes is None:
        classes = [None] * n
    else:  # as in TRL: one per reward function (a single one for a single function)
        classes = list(processing_classes) if isinstance(processing_classes, (list, tuple)) else [processing_classes]
    if len(classes) != n:
        raise ValueError(f"{len(classes)} reward_processing_classes for {n} reward functions (as in TRL, one per function)")
    out = []
    for i, fn in enumerate(funcs):
        if is_reward_model(fn) or (isinstance(fn, (str, os.PathLike)) and ":" not in str(fn) and str(fn) not in REWARDS
                                   and ("/" in str(fn) or Path(fn).exists())):  # an id or folder; else a covey name
            fn = ModelReward(fn, tokenizer=classes[i])
        elif classes[i] is not None:
            raise ValueError(f"reward_processing_classes[{i}] is given but reward {i} is not a reward model")
        if weights is None:
            out.append(fn)
        elif isinstance(fn, str):
            out.append({"name": fn, "weight": float(weights[i])})
        else:
            out.append((fn, RewardSpec(name=getattr(fn, "__name__", type(fn).__name__), weight=float(weights[i]))))
    return out


def _raw_config(config) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, RunConfig):
        return config.model_dump(mode="json")
    if isinstance(config, dict):
        return dict(config)
    if isinstance(config, (str, os.PathLike)):
        return load_config(config).model_dump(mode="json")
    raise TypeError(f"config must be a dict, a RunConfig or a YAML path, got {type(config).__name__}")


def _is_vision(model, raw: dict) -> bool:
    """Whether the policy is a vision-language model (docs/vlm.md): a model object that is one, or a name
    whose config.json says so."""
    from covey.family import family_of
    from covey.models.loading import model_config
    from covey.models.vision import is_vision_model

    if model is not None and not isinstance(model, (str, os.PathLike)):
        return is_vision_model(model)
    name = raw.get("model", {}).get("name")
    return name is not None and family_of(model_config(name)) == "vision_language"


def _model_name(model) -> str:
    """Local folders become absolute paths so the run's config.yaml stays valid from anywhere."""
    p = Path(model)
    return str(p.resolve()) if p.exists() else str(model)


def _dataset_task(train, evaluation, params: dict[str, Any]):
    """(task object, task config): paths are recorded in the config, in-memory data is not."""
    from covey.tasks.dataset import DatasetTask

    def source(data, key: str) -> dict[str, Any]:
        if data is None:
            return {}
        if isinstance(data, (str, os.PathLike)):
            return {key + "path": str(Path(data).resolve())}
        return {key + "rows": data}

    kwargs = {**source(train, ""), **source(evaluation, "eval_"), **params}
    task = DatasetTask(**kwargs)
    recorded = {k: v for k, v in kwargs.items() if not k.endswith("rows")}
    return task, {"name": "dataset", "params": recorded}


def _for_cli(config: RunConfig, reward_funcs: list, train_rows, eval_rows, run_dir: Path, model):
    """(config, whether the rewards now live in it, [(path, rows) to write], why the run can only resume
    from Python or None): what `covey train --resume RUN` and `covey eval --run RUN` need to rebuild a run
    started here. In-memory rows are recorded as RUN/data/train.jsonl (eval.jsonl) when they survive a JSON
    round trip unchanged; reward functions as config rewards when each is a covey reward name, an import
    path, or a plain function importable by module and name (not from __main__, not a closure or lambda)."""
    raw = config.model_dump(mode="json")
    why, writes = [], []
    if model is not None and not isinstance(model, (str, os.PathLike)):
        why.append("the model was passed as an object, not by name or folder")
    params = raw["task"].setdefault("params", {})
    if raw["task"]["name"] == "dataset":
        for rows, key, name in ((train_rows, "path", "train.jsonl"), (eval_rows, "eval_path", "eval.jsonl")):
            if rows is None or isinstance(rows, (str, os.PathLike)) or key in params:
                continue
            plain = _json_rows(rows)
            if plain is None:
                why.append(f"the {name.split('.')[0]} rows are not plain JSON (images, tuples, NaN, ...)")
                continue
            path = (run_dir / "data" / name).resolve()
            writes.append((path, plain))
            params[key] = str(path)
    specs, unnamed = [], []
    for r in reward_funcs:
        spec = _reward_spec(r)
        if spec is None:
            fn = r[0] if isinstance(r, tuple) else r
            unnamed.append(getattr(fn, "__qualname__", type(fn).__name__))
        else:
            specs.append(spec)
    if unnamed:
        why.append(f"reward function(s) {', '.join(unnamed)} cannot be imported by name (defined in __main__, a closure, a "
                   "lambda, an object); define them in a module to resume from the CLI")  # fmt: skip
    moved = bool(reward_funcs) and not unnamed
    if moved:
        raw["rewards"] = list(raw.get("rewards") or []) + specs
    config = validate_config(raw, source="GRPOTrainer config") if (writes or moved) else config
    return config, moved, writes, "; ".join(why) or None


def _json_rows(rows) -> list | None:
    import json

    as_list = rows.to_list() if hasattr(rows, "to_list") else list(rows)
    try:
        text = [json.dumps(r, allow_nan=False) for r in as_list]
    except (TypeError, ValueError):
        return None
    back = [json.loads(t) for t in text]
    return text if back == as_list else None


def _write_rows(writes: list) -> None:
    for path, lines in writes:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, path)


def _reward_spec(r) -> dict | None:
    """A config reward (dict) that rebuilds reward `r` from its name, or None when none can."""
    import importlib
    import types

    from covey.rewards import RewardSpec

    fn, spec = (r if isinstance(r, tuple) else (r, None))
    if isinstance(fn, str):
        return {"name": fn}
    if isinstance(fn, dict):
        return dict(fn)
    if not isinstance(fn, types.FunctionType) or "<" in fn.__qualname__ or fn.__module__ in ("__main__", "__mp_main__"):
        return None
    try:
        obj = importlib.import_module(fn.__module__)
        for part in fn.__qualname__.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    if obj is not fn:
        return None
    base = spec.model_dump() if isinstance(spec, RewardSpec) else {}
    return {**base, "name": f"{fn.__module__}:{fn.__qualname__}", "alias": base.get("alias") or fn.__name__}
