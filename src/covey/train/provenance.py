"""RUN/provenance.json: what produced a run, recorded when training starts.

covey version and the git commit of covey's source (when it runs from a git checkout, with a
`dirty` flag), python / torch / transformers / numpy versions, the platform and CPU model, the sha256
of the resolved config (the JSON of `RunConfig.model_dump`, keys sorted), the command line and the
start time (UTC). A resume keeps the first start's record and appends its own to `resumes`.
`covey compare export` puts this file into the ORB `run.json` when a run has one.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

__all__ = ["FILE", "PYTHON_ONLY", "config_sha256", "environment", "python_only", "record_python_only", "write_provenance"]

FILE = "provenance.json"


def config_sha256(config: dict) -> str:
    """sha256 of the resolved config as canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _git(src: Path) -> dict | None:
    """{commit, dirty} of the git checkout holding `src`, or None (not a checkout, or no git)."""
    try:
        run = lambda *a: subprocess.run(["git", "-C", str(src), *a], capture_output=True, text=True, timeout=10)  # noqa: E731
        head = run("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        status = run("status", "--porcelain", "--untracked-files=no")
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def environment() -> dict:
    """The software and machine of this process (the part of a provenance record that is not the run's)."""
    from covey.version import __version__

    versions = {}
    for pkg in ("torch", "transformers", "numpy"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"covey": __version__, "git": _git(Path(__file__).resolve().parents[1]), "python": sys.version.split()[0],
            **versions, "platform": platform.platform(), "cpu": _cpu_model(), "cpu_count": os.cpu_count()}  # fmt: skip


def write_provenance(run_dir: Path, config: dict, *, resume: bool = False) -> dict:
    """Write (fresh start) or extend (resume) RUN/provenance.json; returns the record written."""
    start = {"start_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "command": list(sys.argv), "config_sha256": config_sha256(config), **environment()}  # fmt: skip
    path = Path(run_dir) / FILE
    record = None
    if resume and path.is_file():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = None  # an unreadable record is replaced by this start's
    if isinstance(record, dict):
        record["resumes"] = [*record.get("resumes", []), start]
    else:
        record = {**start, "resumes": []}
    tmp = path.with_name(f".{FILE}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)
    return record


PYTHON_ONLY = "python_only.json"
"""A run started from Python whose data or rewards the CLI cannot rebuild: {"why": ...} (`covey.api`)."""


def record_python_only(run_dir: str | Path, why: str | None) -> None:
    """Write (or, with `why` None, remove) RUN/python_only.json."""
    path = Path(run_dir) / PYTHON_ONLY
    if why is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(json.dumps({"why": why}) + "\n")


def python_only(run_dir: str | Path) -> str | None:
    """Why the run in `run_dir` can only be resumed from Python, or None when the CLI can rebuild it."""
    path = Path(run_dir) / PYTHON_ONLY
    if not path.is_file():
        return None
    try:
        return str(json.loads(path.read_text()).get("why") or "see python_only.json")
    except (OSError, ValueError, AttributeError):
        return f"{path} says so"
