"""Per-sample eval records (`covey eval --samples-out FILE`): one JSON line per sampled completion.

The file starts with one header line ``{"meta": {...}}`` (task, split, model, n, sampling settings,
seed, shard) and then holds records ``{problem_id, sample, seed, correct, score, answer, length,
finish, completion}`` (the per-sample layout the Limits-of-RLVR study needs). The runner appends the
records of a whole batch of problems with one write and an fsync, so a killed eval leaves complete
problems plus at most one torn last line; `open_samples` drops that tail, checks the header against
the new call's settings and returns the finished problems, which the runner then skips (resume).
Shards (`--shard i/m`) write separate files; `read_samples` merges several files by problem id.

A file is checked line by line when it is read: the header must be ``{"meta": {...}}``; every record an
object with an integer ``problem_id`` and ``sample`` (>= 0) and a boolean ``correct`` (``"false"`` is a
string, not False); no (problem_id, sample) twice (a copied line would inflate N). Anything else is a
one-line ValueError naming the file and the line, never a traceback or a silently wrong count.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["append_records", "correct_counts", "open_samples", "read_samples"]


def _lines(path: Path, hint: str = "") -> tuple[list[dict], int]:
    """Parsed and checked lines (`_check_record`) and the byte length of the complete ones (a torn last line
    is not counted); a file that is not a covey samples file is a ValueError naming the file and line."""
    raw = path.read_bytes()
    good = raw.rfind(b"\n") + 1  # bytes up to the last newline; anything after it is a torn write
    try:
        text = raw[:good].decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a covey samples file ({e})") from None
    rows, seen = [], set()
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:  # RecursionError: nesting past the limit
            why = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
            raise ValueError(f"{path}:{no}: not a JSON line ({why}); is it a covey samples file?") from None
        if not rows:
            if not isinstance(row, dict) or not isinstance(row.get("meta"), dict):
                raise ValueError(f"{path}:{no}: no covey eval header line (a {{\"meta\": {{...}}}} object){hint}")
        else:
            _check_record(row, f"{path}:{no}", seen)
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} has no covey eval header line{hint}")
    return rows, good


def _check_record(r, where: str, seen: set) -> None:
    if not isinstance(r, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(r).__name__}")
    for key in ("problem_id", "sample"):
        if type(r.get(key)) is not int or r[key] < 0:
            raise ValueError(f"{where}: {key!r} must be an integer >= 0, got {str(r.get(key))[:40]}")
    if type(r.get("correct")) is not bool:
        raise ValueError(f"{where}: 'correct' must be true or false, got {json.dumps(r.get('correct'))[:40]}")
    key = (r["problem_id"], r["sample"])
    if key in seen:
        raise ValueError(f"{where}: sample {r['sample']} of problem {r['problem_id']} appears twice")
    seen.add(key)


def open_samples(path: str | Path, meta: dict, n: int) -> dict[int, list[dict]]:
    """Prepare `path` for appending: a new file gets the header; an existing one must have the same
    header (else ValueError: resuming with other settings would mix two evaluations), loses a torn
    last line, and its finished problems (all `n` samples written) are returned by problem id."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--samples-out {path} is a folder; give a file name (e.g. {path / 'samples.jsonl'})")
    if not path.exists() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"meta": meta}) + "\n")
        return {}
    rows, good = _lines(path, "; give a new --samples-out file")
    old = rows[0]["meta"]
    diff = sorted(k for k in set(old) | set(meta) if old.get(k) != meta.get(k))
    if diff:
        detail = ", ".join(f"{k}: {old.get(k)!r} in the file, {meta.get(k)!r} now" for k in diff)
        raise ValueError(f"{path} was written with other settings ({detail}); resume with the same ones or use a new file")
    if good < path.stat().st_size:
        with open(path, "r+b") as f:  # drop the torn tail of a killed write
            f.truncate(good)
    by_pid: dict[int, list[dict]] = {}
    for r in rows[1:]:
        by_pid.setdefault(r["problem_id"], []).append(r)
    return {pid: sorted(rs, key=lambda r: r["sample"]) for pid, rs in by_pid.items() if len({r["sample"] for r in rs}) >= n}


def append_records(path: str | Path, records: list[dict]) -> None:
    """Append records with one write, flushed to disk (a kill loses at most this batch)."""
    if not records:
        return
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())


def read_samples(paths: str | Path | list) -> tuple[dict, dict[int, list[dict]]]:
    """Header meta (of the first file) and the records by problem id, merged over several files
    (shards of one evaluation: headers equal but for `shard`; a problem id in two files is an error)."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    meta: dict = {}
    merged: dict[int, list[dict]] = {}
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise FileNotFoundError(f"no samples file {p}")
        rows, _ = _lines(p)
        this = {k: v for k, v in rows[0]["meta"].items() if k != "shard"}
        if merged and this != {k: v for k, v in meta.items() if k != "shard"}:
            raise ValueError(f"{p} was written with other settings than {paths[0]}; shards to merge must differ only in --shard")
        meta = meta or rows[0]["meta"]
        mine: dict[int, list[dict]] = {}
        for r in rows[1:]:
            mine.setdefault(r["problem_id"], []).append(r)
        clash = sorted(set(mine) & set(merged))
        if clash:
            raise ValueError(f"problem ids {clash[:5]} appear in more than one samples file ({p})")
        merged.update(mine)
    if not merged:
        raise ValueError(f"no sample records in {', '.join(map(str, paths))}")
    return meta, merged


def correct_counts(records: dict[int, list[dict]]) -> dict[int, tuple[int, int]]:
    """problem id -> (samples N, correct c)."""
    return {pid: (len(rs), sum(1 for r in rs if r["correct"])) for pid, rs in records.items()}
