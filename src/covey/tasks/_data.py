"""Finding and reading the benchmark files of the data-backed tasks (JSON Lines, plain or gzipped).

Where data comes from, first match wins:

1. an explicit `path` (a dataset folder, a folder holding it, or one file);
2. ``"hub"`` as the path: the Hugging Face Hub through `datasets.load_dataset` (needs the network
   or the `datasets` cache; ``"hub:owner/name"`` names another repository with the same fields; a
   local folder named ``hub`` is ``./hub``);
3. ``$COVEY_DATA/<name>`` when that folder exists;
4. the copy shipped inside the package, ``covey/tasks/data/<name>`` (gzipped; each folder has the
   upstream LICENSE and a README with the provenance and checksums).

Parsing task-specific fields is left to each task.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SHIPPED", "check_fields", "data_file", "hub_rows", "is_hub", "read_json", "read_jsonl", "resolve_data_dir"]

SHIPPED = Path(__file__).resolve().parent / "data"  # package data: gsm8k, math500, mbpp
HUB_PREFIX = "hub:"


def is_hub(path) -> bool:
    """True for ``"hub"`` / ``"hub:owner/name"``: load from the Hugging Face Hub."""
    return isinstance(path, str) and (path == "hub" or path.startswith(HUB_PREFIX))


def resolve_data_dir(data_dir: str | os.PathLike | None, sub: str) -> Path:
    """The dataset folder `sub` (e.g. "gsm8k"): inside `data_dir` (which may also be the `sub`
    folder itself), else ``$COVEY_DATA/<sub>``, else the shipped copy.

    An explicit `data_dir` that holds no `sub` folder is an error listing the place tried;
    $COVEY_DATA without a `sub` folder falls through to the shipped copy.
    """
    candidates = [Path(data_dir)] if data_dir else []
    if not data_dir and os.environ.get("COVEY_DATA"):
        candidates.append(Path(os.environ["COVEY_DATA"]))
    if not data_dir:
        candidates.append(SHIPPED)
    for root in candidates:
        if (root / sub).is_dir():
            return root / sub
        if root.name == sub and root.is_dir():
            return root
    tried = ", ".join(str(c / sub) for c in candidates)
    raise FileNotFoundError(
        f"no {sub!r} data folder found (tried {tried}); pass path=<folder or file>, path='hub' "
        f"(Hugging Face Hub), or set COVEY_DATA; without path the copy shipped in covey/tasks/data is used"
    )


def data_file(path: str | os.PathLike | None, sub: str, name: str) -> Path:
    """``<name>`` or ``<name>.gz`` of dataset `sub` (e.g. "test.jsonl"); an explicit `path` may name
    a folder or the file itself."""
    if path is not None and Path(path).is_file():
        return Path(path)
    folder = resolve_data_dir(path, sub)
    for file in (folder / name, folder / f"{name}.gz"):
        if file.is_file():
            return file
    raise FileNotFoundError(f"{sub}: neither {folder / name} nor {folder / name}.gz exists")


def _open(file: Path):
    return gzip.open(file, "rb") if file.suffix == ".gz" else open(file, "rb")


def read_json(file: Path):
    """One JSON document (plain or gzipped), e.g. MBPP's sanitized JSON array."""
    with _open(file) as f:
        try:
            return json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{file}: not valid UTF-8 JSON ({e})") from None


def read_jsonl(file: Path, required: Sequence[str]) -> list[tuple[int, dict]]:
    """``(line number, row)`` of each JSON Lines row (``.gz`` files are decompressed); a bad line
    fails with ``<file>:<line>: <problem>`` (not UTF-8, not JSON, not an object, missing fields).

    Blank lines are skipped (so line numbers, not row indices, name the place of an error).
    """
    rows = []
    with _open(file) as f:
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


def hub_rows(path: str, default_repo: str, config: str | None, splits: Sequence[str],
             required: Sequence[str]) -> tuple[str, list[tuple[int, dict]]]:
    """``(source name, [(row number, row)])`` of the hub splits `splits`, concatenated in order.

    `path` is ``"hub"`` (use `default_repo`) or ``"hub:owner/name"``. Row numbers count from 1 over
    the concatenation, so errors read ``hub:openai/gsm8k[test]:<row>: ...`` like file errors.
    """
    import datasets

    repo = path.removeprefix("hub").removeprefix(":") or default_repo
    rows: list[tuple[int, dict]] = []
    for split in splits:
        try:
            data = datasets.load_dataset(repo, config, split=split)
        except Exception as e:  # noqa: BLE001 - offline, unknown repo or split: one readable line
            raise FileNotFoundError(
                f"could not load {repo!r} (config {config!r}, split {split!r}) from the Hugging Face Hub: "
                f"{type(e).__name__}: {str(e)[:200]}; offline, drop path to use the shipped copy"
            ) from None
        for row in data:
            missing = [k for k in required if k not in row]
            if missing:
                raise ValueError(f"hub:{repo}[{split}]:{len(rows) + 1}: missing field(s) {missing}; "
                                 f"each row needs {list(required)}")
            rows.append((len(rows) + 1, dict(row)))
    return f"hub:{repo}[{'+'.join(splits)}]", rows


def check_fields(file, lineno: int, row: dict, types: dict[str, type | tuple[type, ...]]) -> None:
    """Fail with ``<file>:<line>: field 'x' must be <type>, got ...`` for null or wrongly typed fields."""
    for key, typ in types.items():
        val = row.get(key)
        if val is None or isinstance(val, bool) or not isinstance(val, typ):
            names = " or ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
            raise ValueError(f"{file}:{lineno}: field {key!r} must be {names}, got {type(val).__name__} {val!r}"[:300])
