"""Per-step metrics: one JSON object per line in RUN_DIR/metrics.jsonl, mirrored to TensorBoard.

JSONL is the source of truth (plots and resume read it); TensorBoard is a view. On resume the file is
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

__all__ = ["MetricsLogger", "read_metrics"]


class MetricsLogger:
    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, resume_step: int | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        if resume_step is not None and self.path.exists():  # drop rows past the checkpoint, atomically
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            try:
                tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
                os.replace(tmp, self.path)
            except OSError as e:
                raise write_error(self.path, e) from None
        self._file = open(self.path, "a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(Path(run_dir) / "tb"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as e:
            raise write_error(self.path, e) from None
        if self._tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


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
