"""Run a system program (not Python) on untrusted input under bubblewrap: the `binary` profile.

`run.py`'s sandbox (`_process.py`) runs stdlib-only Python; this profile runs a shell script that calls
host binaries (pdflatex, pdftoppm) on files handed in, with the same walls:

    bwrap  own mount/pid/net/ipc/uts namespaces (no network); read-only /usr plus the read-only `binds`
           (e.g. /etc/texmf); no home, no rest of /etc; a private size-limited tmpfs /tmp as working
           directory holding only `files`; a clean environment (PATH=/usr/bin:/bin, HOME=/tmp, + `env`)
      prlimit  address space, CPU, file size, open files, processes (per process, as for Python)
        setpriv  a fresh unprivileged uid, no capabilities, no_new_privs (root host; else a user namespace)
          /bin/bash -c <script> bash <fd>     $1 = a descriptor whose bytes come back as RunResult.channel

There is no unsandboxed fallback: where bubblewrap does not run, `SandboxUnavailable` is raised.
"""

from __future__ import annotations

import os

from ._process import _bwrap_run, _system_mounts, sandbox_status
from .limits import RunResult, SandboxLimits, SandboxUnavailable

__all__ = ["run_script"]


def run_script(script: str, files: dict[str, bytes], limits: SandboxLimits, *, binds: tuple[str, ...] = (),
               env: dict[str, str] | None = None) -> RunResult:  # fmt: skip
    """Run ``bash -c script`` in a fresh sandbox with `files` in its working directory /tmp.

    The script writes its result to the descriptor in ``$1`` (``cat out >&"$1"``; bash, since dash cannot name descriptors above 9 and the
    new uid may not reopen the pipe through /proc); it comes back in
    ``RunResult.channel`` (at most ``limits.max_drain_bytes``). `binds`: host directories mounted
    read-only at the same path (missing ones are skipped; /usr is always there).
    """
    ok, reason = sandbox_status()
    if not ok:
        raise SandboxUnavailable(f"cannot sandbox a program here: {reason}")
    cmd = _system_mounts()
    for path in binds:
        if not os.path.isabs(path) or ".." in path.split("/"):
            raise ValueError(f"binds must be absolute host paths, got {path!r}")
        if os.path.exists(path) and not path.startswith("/usr/"):
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):  # bwrap would create the parents 0700: make them traversable
                cmd += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
            cmd += ["--ro-bind", path, path]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    # collect() appends the channel's descriptor to argv: $1
    return _bwrap_run(cmd, files, env or {}, ["/bin/bash", "-c", script, "bash"], b"", limits, True)
