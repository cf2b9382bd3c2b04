"""TRL's names for covey's numbers: metric aliases and the `trainer_state.json` of a checkpoint.

A TRL user's dashboards and scripts look for `reward`, `reward_std`, `completions/mean_length`, `kl`,
`clip_ratio/...`, `loss`, `learning_rate` (TRL 1.16 `GRPOTrainer._metrics`, `transformers.Trainer.log`).
`trl_metrics(m)` gives those of a covey step's metrics that covey measures the same way:

    TRL name                      covey metric                  note
    reward                        reward/mean                   the scalar reward the advantages see
    reward_std                    reward/std                    unbiased, over the batch (TRL's nanstd)
    rewards/<name>/mean           reward/<name>/mean            per reward function
    frac_reward_zero_std          prompts/zero_signal_frac      groups whose rewards are all equal
    completions/mean_length       length/mean
    completions/max_length        length/max
    completions/clipped_ratio     length/truncated_frac         cut at max_new_tokens
    kl                            kl/mean                       with a KL term
    entropy                       entropy/mean                  when the run computes entropies
    clip_ratio/low_mean           surrogate/clip_frac_low       A < 0 and ratio < 1 - eps_low
    clip_ratio/high_mean          surrogate/clip_frac_high      A > 0 and ratio > 1 + eps_high
    clip_ratio/region_mean        clip_frac_low + clip_frac_high (disjoint)
    loss, grad_norm, learning_rate  learn/loss, learn/grad_norm, learn/lr

TensorBoard and Weights & Biases get them as `train/<TRL name>` beside covey's own keys (`covey.train.metrics`);
`GRPOTrainer.state.log_history` and each checkpoint's trainer_state.json hold them unprefixed, as TRL's do.
metrics.jsonl keeps covey's names only. Not aliased (covey has no same quantity): TRL's per-sequence
`clip_ratio/low_min` / `high_max`, `num_tokens`, `rewards/<name>/std` (covey's is the population std).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["TRL_NAMES", "log_history", "trainer_state", "trl_metrics", "write_trainer_state"]

TRL_NAMES = {
    "reward/mean": "reward",
    "reward/std": "reward_std",
    "prompts/zero_signal_frac": "frac_reward_zero_std",
    "length/mean": "completions/mean_length",
    "length/max": "completions/max_length",
    "length/truncated_frac": "completions/clipped_ratio",
    "kl/mean": "kl",
    "entropy/mean": "entropy",
    "surrogate/clip_frac_low": "clip_ratio/low_mean",
    "surrogate/clip_frac_high": "clip_ratio/high_mean",
    "learn/loss": "loss",
    "learn/grad_norm": "grad_norm",
    "learn/lr": "learning_rate",
}
_SKIP = ("reward/total/", "reward/seconds", "reward/unscorable")  # reward/<x>/mean keys that are no reward column


def trl_metrics(m: dict[str, Any]) -> dict[str, Any]:
    """TRL's names for the metrics in `m` that covey measures as TRL does (module docstring).

    >>> trl_metrics({"reward/mean": 0.5, "reward/accuracy/mean": 0.25, "surrogate/clip_frac_low": 0.1,
    ...              "surrogate/clip_frac_high": 0.2, "learn/lr": 1e-6, "time/step": 3.0})
    {'reward': 0.5, 'clip_ratio/low_mean': 0.1, 'clip_ratio/high_mean': 0.2, 'learning_rate': 1e-06, 'rewards/accuracy/mean': 0.25, 'clip_ratio/region_mean': 0.30000000000000004}
    """
    out = {trl: m[ours] for ours, trl in TRL_NAMES.items() if ours in m}
    for key, value in m.items():
        if key.startswith("reward/") and key.endswith("/mean") and key.count("/") == 2 and not key.startswith(_SKIP):
            out[f"rewards/{key.split('/')[1]}/mean"] = value
    low, high = m.get("surrogate/clip_frac_low"), m.get("surrogate/clip_frac_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        out["clip_ratio/region_mean"] = low + high
    return out


def log_history(rows: list[dict[str, Any]], steps_per_epoch: float | None = None) -> list[dict[str, Any]]:
    """transformers' `TrainerState.log_history` from metrics.jsonl rows: per logged step, covey's metrics,
    their TRL names, `step` and (when the dataset size is known) `epoch`; non-finite values dropped."""
    out = []
    for row in rows:
        step = row.get("step", 0)
        entry = {k: v for k, v in row.items() if k != "step" and _finite(v)}
        entry.update({k: v for k, v in trl_metrics(entry).items() if _finite(v)})
        if steps_per_epoch:
            entry["epoch"] = step / steps_per_epoch
        entry["step"] = step
        out.append(entry)
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def trainer_state(step: int, max_steps: int, rows: list[dict[str, Any]], *, save_steps: int = 0,
                  batch_rows: int = 0, steps_per_epoch: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A `transformers.TrainerState` as JSON (`TrainerState.load_from_json` reads it). `global_step` counts
    covey steps (one generated batch each; TRL counts optimizer steps, the same with one update per batch)."""
    epochs = math.ceil(max_steps / steps_per_epoch) if steps_per_epoch else 1
    return {
        "epoch": step / steps_per_epoch if steps_per_epoch else 0.0,
        "global_step": step,
        "max_steps": max_steps,
        "logging_steps": 1,
        "eval_steps": 0,
        "save_steps": save_steps,
        "train_batch_size": batch_rows,
        "num_train_epochs": epochs,
        "num_input_tokens_seen": 0,
        "total_flos": 0,
        "log_history": log_history([r for r in rows if r.get("step", 0) <= step], steps_per_epoch),
        "best_metric": None,
        "best_global_step": None,
        "best_model_checkpoint": None,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "is_hyper_param_search": False,
        "trial_name": None,
        "trial_params": None,
        "stateful_callbacks": {},
    }


def write_trainer_state(folder: Path, run_dir: Path, step: int, cfg, n_items: int | None = None) -> None:
    """folder/trainer_state.json for step `step` of the run in `run_dir` (its metrics.jsonl so far)."""
    from covey.train.metrics import read_metrics

    path = Path(run_dir) / "metrics.jsonl"
    rows = read_metrics(path) if path.is_file() else []
    per_epoch = n_items / cfg.rollout.prompts_per_step if n_items else None
    state = trainer_state(step, cfg.steps, rows, save_steps=cfg.checkpoint.every,
                          batch_rows=cfg.rollout.prompts_per_step * cfg.rollout.group_size, steps_per_epoch=per_epoch)  # fmt: skip
    (Path(folder) / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
