"""Per-step metrics: one JSON object per line in RUN_DIR/metrics.jsonl, mirrored to TensorBoard.

JSONL is the source of truth (plots and resume read it); TensorBoard is a view. TensorBoard and W&B also get
TRL's names for the metrics TRL logs (`train/reward`, `train/completions/mean_length`, ...: `covey.train.trl_names`). On resume the file is
cut back to the resumed step (written to a temporary file, then renamed over it, so a kill during the
rewrite loses nothing) so a killed-and-resumed run has exactly one line per step.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from covey.train.checkpoint import write_error
from covey.train.trl_names import trl_metrics

__all__ = ["MetricsLogger", "markdown_table", "read_metrics", "sample_rows", "sample_table"]


class MetricsLogger:
    """Writes each step's metrics to RUN/metrics.jsonl and to the sinks in `report_to`
    ("tensorboard": RUN/tb/, "wandb": a Weights & Biases run, offline by default), and sample
    completions to RUN/samples.jsonl (`log_samples`)."""

    def __init__(self, run_dir: str | Path, *, report_to=("jsonl", "tensorboard"), resume_step: int | None = None,
                 wandb_project: str = "covey", wandb_mode: str = "offline", config: dict | None = None):  # fmt: skip
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.samples_path = self.run_dir / "samples.jsonl"
        if resume_step is not None:  # drop rows past the checkpoint, atomically
            for path in (self.path, self.samples_path):
                if path.exists():
                    _truncate(path, resume_step)
        self._file = open(self.path, "a")
        self._tb = self._wandb = None
        if "tensorboard" in report_to:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tb"))
        if "wandb" in report_to:
            self._wandb = _wandb_run(self.run_dir, wandb_project, wandb_mode, config, resume_step is not None)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        _append(self._file, self.path, row)
        scalars = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}
        scalars.update({f"train/{k}": v for k, v in trl_metrics(scalars).items()})  # TRL's names (covey.train.trl_names)
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Append sample completions (one JSON object each, with the step) to RUN/samples.jsonl, and
        send them to the other sinks: TensorBoard text `samples` (a markdown table per step), a W&B
        Table `samples` (one per step; columns step, group, prompt, completion, advantage, rewards)."""
        try:
            f = open(self.samples_path, "a")
        except OSError as e:
            raise write_error(self.samples_path, e) from None
        with f:
            for r in rows:
                _append(f, self.samples_path, {"step": step, **r})
        if not rows:
            return
        columns, data = sample_table(rows)
        if self._tb is not None:
            self._tb.add_text("samples", markdown_table(columns, data), step)
            self._tb.flush()
        if self._wandb is not None:
            import wandb

            self._wandb.log({"samples": wandb.Table(columns=["step", *columns], data=[[step, *d] for d in data])}, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def sample_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows) of sample completions (`sample_rows`): group, prompt, completion,
    advantage, then one column per reward."""
    rewards = list(dict.fromkeys(k for r in rows for k in r.get("rewards", {})))
    columns = ["group", "prompt", "completion", "advantage", *rewards]
    data = [[r.get("group"), _text(r.get("prompt")), r.get("completion"), r.get("advantage"),
             *(r.get("rewards", {}).get(k) for k in rewards)] for r in rows]  # fmt: skip
    return columns, data


def _text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def markdown_table(columns: list[str], data: list[list[Any]]) -> str:
    """A markdown table (TensorBoard renders text summaries as markdown); `|` and newlines in cells
    are escaped so every sample stays one row.

    >>> print(markdown_table(["a", "b"], [["x|y", 0.5], ["1\\n2", None]]))
    | a | b |
    |---|---|
    | x\\|y | 0.5 |
    | 1<br>2 |  |
    """

    def cell(v: Any) -> str:
        text = "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
        return text.replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in data]
    return "\n".join(lines)


def _append(f, path: Path, row: dict[str, Any]) -> None:
    try:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
    except OSError as e:
        raise write_error(path, e) from None


def _truncate(path: Path, step: int) -> None:
    kept = [r for r in read_metrics(path) if r.get("step", 0) <= step]
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)
    except OSError as e:
        raise write_error(path, e) from None


def _wandb_run(run_dir: Path, project: str, mode: str, config: dict | None, resume: bool):
    try:
        import wandb
    except ImportError:
        raise ValueError("log.report_to has wandb but the wandb package is not installed: pip install wandb, "
                         "or remove it from log.report_to") from None  # fmt: skip
    return wandb.init(project=project, name=run_dir.name, id=run_dir.name, dir=str(run_dir), mode=mode,
                      config=config, resume="allow" if resume else None)  # fmt: skip


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl (a truncated last line from a kill is skipped)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def sample_rows(batch, tokenizer, n: int) -> list[dict[str, Any]]:
    """The first `n` rows of a scored batch as plain dicts: prompt, completion, rewards, advantage."""
    if batch is None or len(batch) == 0:
        return []
    from covey.models.chat import content_text
    from covey.strategies.group import completion_texts

    idx = list(range(min(n, len(batch))))
    if batch.episode is not None:  # multi-turn episodes: one sample per episode (per_step has a row per turn)
        first: dict[int, int] = {}
        for i, e in enumerate(batch.episode.tolist()):
            first.setdefault(e, i)
        idx = list(first.values())[:n]
    sub = batch.select(idx)
    texts = completion_texts(tokenizer, sub)
    rows = []
    for i, text in enumerate(texts):
        prompt = sub.items[i]["prompt"] if sub.items is not None else None
        if isinstance(prompt, list):  # chat: the last user message
            prompt = content_text(next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), prompt[-1]["content"]))
        row = {"group": int(sub.group[i]), "prompt": prompt, "completion": text}
        if sub.items is not None and "transcript" in sub.items[i]:  # the whole episode, turn by turn, with roles
            row["episode"], row["episode_end"] = sub.items[i]["transcript"], sub.items[i]["episode_end"]
        if sub.rewards is not None:
            row["rewards"] = {name: float(sub.rewards[i, k]) for k, name in enumerate(sub.reward_names)}
        if sub.advantages is not None:
            a = sub.advantages[i]
            row["advantage"] = float(a if a.dim() == 0 else (a * sub.completion_mask[i]).sum() / sub.completion_mask[i].sum().clamp(min=1))
        rows.append(row)
    return rows
