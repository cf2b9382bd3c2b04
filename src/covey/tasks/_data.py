"""Finding and reading the benchmark files of the data-backed tasks (JSON Lines).

Where data lives: an explicit path, else $COVEY_DATA, else ``<repo>/../shared/data`` (the
``shared/`` folder next to the repository, as in the dev and CI layout). Parsing task-specific
fields is left to each task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["check_fields", "data_file", "read_jsonl", "resolve_data_dir"]

_REPO = Path(__file__).resolve().parents[3]  # src/covey/tasks/_data.py -> repository root


def resolve_data_dir(data_dir: str | os.PathLike | None, sub: str) -> Path:
    """The dataset folder `sub` (e.g. "gsm8k") inside `data_dir`, $COVEY_DATA or <repo>/../shared/data.

    `data_dir` may also be the `sub` folder itself. The first candidate that exists wins; the
    error lists every place tried.
    """
    if data_dir:
        candidates = [Path(data_dir)]
    else:
        env = os.environ.get("COVEY_DATA")
        candidates = ([Path(env)] if env else []) + [_REPO.parent / "shared" / "data"]
    for root in candidates:
        if (root / sub).is_dir():
            return root / sub
        if root.name == sub and root.is_dir():
            return root
    tried = ", ".join(str(c / sub) for c in candidates)
    raise FileNotFoundError(f"no {sub!r} data folder found (tried {tried}); pass path=... or set COVEY_DATA")


def data_file(path: str | os.PathLike | None, sub: str, split: str) -> Path:
    """``<split>.jsonl`` of dataset `sub`; an explicit `path` may name a folder or the file itself."""
    if path is not None and Path(path).is_file():
        return Path(path)
    file = resolve_data_dir(path, sub) / f"{split}.jsonl"
    if not file.is_file():
        raise FileNotFoundError(f"{sub}: split file {file} does not exist")
    return file


def read_jsonl(file: Path, required: Sequence[str]) -> list[tuple[int, dict]]:
    """``(line number, row)`` of each JSON Lines row; a bad line fails with ``<file>:<line>: <problem>``
    (not UTF-8, not JSON, not an object, missing fields).

    Blank lines are skipped (so line numbers, not row indices, name the place of an error).
    """
    rows = []
    with open(file, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{file}:{lineno}: not valid UTF-8 (byte {raw[e.start]:#x} at column {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{file}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{file}:{lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [k for k in required if k not in row]
            if missing:
                raise ValueError(f"{file}:{lineno}: missing field(s) {missing}; each row needs {list(required)}")
            rows.append((lineno, row))
    return rows


def check_fields(file, lineno: int, row: dict, types: dict[str, type | tuple[type, ...]]) -> None:
    """Fail with ``<file>:<line>: field 'x' must be <type>, got ...`` for null or wrongly typed fields."""
    for key, typ in types.items():
        val = row.get(key)
        if val is None or isinstance(val, bool) or not isinstance(val, typ):
            names = " or ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
            raise ValueError(f"{file}:{lineno}: field {key!r} must be {names}, got {type(val).__name__} {val!r}"[:300])
