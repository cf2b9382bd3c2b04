"""Run a script that uses the sandbox package as a non-root user, as covey runs on most hosts.

The package is stdlib-only: it is copied where that user can read it and imported as `sbx`. Already
non-root: the script runs as we are. Root: it runs as uid/gid 65534 through `setpriv` under a Python
that user can start; where neither works, the caller skips with the reason.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from covey.rewards import sandbox

NON_ROOT_UID = 65534


_CHECK = (  # the sandbox binds and runs the base interpreter: that user must reach it too
    "import os, sys; exe = os.path.realpath(getattr(sys, '_base_executable', None) or sys.executable)\n"
    "assert sys.version_info >= (3, 10) and os.access(exe, os.X_OK) and os.access(sys.base_prefix, os.R_OK | os.X_OK)"
)


def _python_for(uid):
    """A Python interpreter `uid` can run (ours may live in a private home such as /root/.pyenv)."""
    seen = []
    for exe in (sys.executable, getattr(sys, "_base_executable", None), "/usr/bin/python3", shutil.which("python3")):
        if not exe or exe in seen:
            continue
        seen.append(exe)
        ok = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", exe, "-c",
                             _CHECK], capture_output=True, timeout=30)
        if ok.returncode == 0:
            return exe
    return None


def run_as_non_root(script: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess | None, str]:
    """(the finished process, "") or (None, why no non-root user could run it)."""
    user = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            return None, "running as root and setpriv (util-linux) is missing: no way to become a non-root user"
        exe = _python_for(NON_ROOT_UID)
        if exe is None:
            return None, f"no Python interpreter that uid {NON_ROOT_UID} can run (ours lives in a private home)"
        user = ["setpriv", f"--reuid={NON_ROOT_UID}", f"--regid={NON_ROOT_UID}", "--clear-groups"]
    else:
        exe = sys.executable
    root = tempfile.mkdtemp(prefix="covey-sbx-")
    try:
        shutil.copytree(os.path.dirname(sandbox.__file__), os.path.join(root, "sbx"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        for d, _, files in os.walk(root):
            os.chmod(d, 0o755)
            for name in files:
                os.chmod(os.path.join(d, name), 0o644)
        prelude = f"import sys; sys.path.insert(0, {root!r})\nimport sbx\n"
        out = subprocess.run([*user, exe, "-B", "-c", prelude + script], capture_output=True, text=True,
                             timeout=timeout, cwd="/")
    finally:
        shutil.rmtree(root)
    return out, ""
