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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from covey.train.config import RunConfig, apply_overrides, load_config, validate_config

__all__ = ["GRPOTrainer"]


class GRPOTrainer:
    """Build a run from objects and train it (see the module docstring).

    model:          alias / folder / hub id (str), or an HF `PreTrainedModel` (then also pass
                    `tokenizer`, or keep the one saved with the model's `name_or_path`).
    reward_funcs:   a callable or import path, or a list of them; TRL's signature
                    `fn(prompts, completions, **columns) -> list[float]`.
    train_dataset:  `datasets.Dataset`, list of dicts, or a path (.jsonl, .parquet, save_to_disk
                    folder); None keeps the config's task.
    eval_dataset:   the same, for the held-out accuracy before/after training (needs `answer_key`).
    config:         dict of covey config keys (`covey config show` lists them), a `RunConfig`, or a
                    YAML path.
    run_dir:        where checkpoints, metrics and `final/` go (default: log.dir/log.name).
    dataset_params: extra parameters of the `dataset` task (prompt_key, system_prompt, answer_key, ...).
    """

    def __init__(
        self,
        model: Any = None,
        reward_funcs: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        config: dict | RunConfig | str | os.PathLike | None = None,
        *,
        tokenizer: Any = None,
        run_dir: str | os.PathLike | None = None,
        **dataset_params: Any,
    ):
        from covey.train.run import default_run_dir
        from covey.train.trainer import Trainer

        raw = _raw_config(config)
        if isinstance(model, (str, os.PathLike)):
            raw = apply_overrides(raw, {"model": {"name": _model_name(model)}})
        task = None
        if train_dataset is not None:
            task, task_cfg = _dataset_task(train_dataset, eval_dataset, dataset_params)
            kept = {k: v for k, v in raw.get("task", {}).items() if k in ("split", "eval_split", "on_long_prompt")}  # not the old task's params
            raw = {**raw, "task": {**kept, **task_cfg}}
            if eval_dataset is not None and getattr(task, "reward", None) is not None and not raw.get("eval", {}).get("size"):
                raw = apply_overrides(raw, {"eval": {"size": len(task.examples("test"))}})
        elif eval_dataset is not None or dataset_params:
            raise ValueError("eval_dataset and dataset parameters need a train_dataset")
        self.config = validate_config(raw, source="GRPOTrainer config")
        if self.config.eval.size and task is not None and getattr(task, "reward", None) is None:
            raise ValueError(f"eval.size={self.config.eval.size} needs a verifier: give the dataset an "
                             f"{dataset_params.get('answer_key', 'answer')!r} column or set eval.size=0")  # fmt: skip
        funcs = [] if reward_funcs is None else reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(self.config)
        if (self.run_dir / "metrics.jsonl").exists():
            raise FileExistsError(f"{self.run_dir} already holds a run: pass another run_dir")
        self.trainer = Trainer(
            self.config, self.run_dir, task=task, reward_funcs=list(funcs),
            model=None if isinstance(model, (str, os.PathLike)) else model, tokenizer=tokenizer,
        )  # fmt: skip
        self.model, self.tokenizer = self.trainer.model, self.trainer.tokenizer
        self.summary: dict[str, Any] = {}

    def train(self) -> dict[str, Any]:
        """Train for `config.steps` steps; returns the last step's metrics merged with the run
        summary (run_dir, checkpoint, eval_before/eval_after when evaluated, plots)."""
        from covey.train.run import train

        self.summary = train(self.config, self.run_dir, trainer=self.trainer)
        return {**self.trainer.last_metrics, **self.summary}

    def step(self) -> dict[str, Any]:
        """One training step (no progress bar, no end-of-run save); returns its metrics."""
        return self.trainer.step()

    def save_model(self, path: str | os.PathLike) -> Path:
        """Save the current policy as a `save_pretrained` folder with its tokenizer (LoRA: merged)."""
        from covey.train.setup import engine_model

        path = Path(path)
        model = self.trainer.model
        if hasattr(model, "get_base_model"):
            model = engine_model(model)  # merged copy; the trained adapters stay as they are
        model.save_pretrained(path)
        self.trainer.tokenizer.save_pretrained(path)
        return path

    def close(self) -> None:
        """Free reward workers, the engine's buffers and open metric files."""
        self.trainer.close()

    def __enter__(self) -> "GRPOTrainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
