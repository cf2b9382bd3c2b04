"""Start one program under bubblewrap (or, by explicit opt-in, under rlimits only) and collect it.

The layers, outermost first (root host)::

    bwrap  (mount/pid/net/ipc/uts namespaces; read-only /usr and interpreter; tmpfs /tmp; no /etc, no home)
      prlimit  (RLIMIT_AS, CPU, FSIZE, NOFILE, NPROC, CORE; inherited by everything below)
        setpriv  (a fresh unprivileged uid/gid, no groups, no capabilities, no_new_privs)
          python -I -B -S <file>   (isolated, stdlib only: site-packages cost ~50 ms per start)

Each call gets its own uid (1_000_000 + 64 * pid + slot) so RLIMIT_NPROC, which counts processes per
uid, is not shared between concurrent sandboxes. A non-root host cannot switch uid: there bwrap makes a
user namespace instead and the code keeps the caller's (already unprivileged) uid.

Reading output, the wall time and teardown are `collect.py`'s; limits and results are `limits.py`'s.
The package uses only the standard library and relative imports, so it also runs outside covey.
This module knows nothing about tests or rewards (see `testing.py` and `covey.rewards.code`).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import sys
import tempfile
import threading

from .collect import collect
from .limits import RunResult, SandboxLimits, SandboxUnavailable
from .profile import STDLIB, Profile

__all__ = ["RunResult", "SandboxLimits", "SandboxUnavailable", "execute", "sandbox_status"]

log = logging.getLogger(__name__)

_UID_BASE = 1_000_000
_SLOTS = 64
_slot_lock = threading.Lock()
_free_slots = list(range(_SLOTS))


def interpreter() -> tuple[str, str]:
    """(python executable, prefix to bind read-only): the base interpreter of the running Python."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


@functools.lru_cache(maxsize=1)
def sandbox_status() -> tuple[bool, str]:
    """(usable, reason): whether bubblewrap runs a trivial program here; probed once per process."""
    missing = [tool for tool in ("bwrap", "prlimit", "setpriv") if shutil.which(tool) is None]
    if missing:
        return False, f"{', '.join(missing)} not found on PATH (apt-get install bubblewrap util-linux)"
    try:
        res = _run_bwrap(["-c", "print(6 * 7)"], {}, b"", SandboxLimits(timeout_s=10.0), False)
    except OSError as e:
        return False, f"bwrap failed to start: {e}"
    if res.exit_code != 0 or res.stdout.strip() != "42":
        return False, f"bwrap probe failed (exit {res.exit_code}): {res.stderr.strip()[-500:]}"
    return True, "bubblewrap"


def unsandboxed_allowed(flag: bool | None) -> bool:
    if flag is not None:
        return bool(flag)
    return os.environ.get("COVEY_ALLOW_UNSANDBOXED", "").strip().lower() in ("1", "true", "yes")


def execute(
    args: list[str],
    files: dict[str, bytes],
    stdin: bytes,
    limits: SandboxLimits,
    channel: bool = False,
    allow_unsandboxed: bool | None = None,
    profile: Profile = STDLIB,
) -> RunResult:
    """Run ``python -I -B -S *args`` (stdlib only: no site-packages) with `files` (name -> bytes) in a fresh working directory.

    With `channel`, a pipe's write end is passed in and its number appended to `args`; what the
    program writes there comes back in `RunResult.channel` (read while it runs, so it never blocks).
    `profile` adds read-only directories, environment variables and interpreter arguments (`profile.py`).
    """
    ok, reason = sandbox_status()
    if ok:
        return _run_bwrap(args, files, stdin, limits, channel, profile)
    if not unsandboxed_allowed(allow_unsandboxed):
        raise SandboxUnavailable(
            f"cannot sandbox code here: {reason}. Install bubblewrap (apt-get install bubblewrap), or accept "
            "a much weaker rlimit-only mode (no namespaces: the code can read your files and use the network) "
            "with allow_unsandboxed=True or COVEY_ALLOW_UNSANDBOXED=1."
        )
    _warn_unsandboxed(reason)
    return _run_rlimit_only(args, files, stdin, limits, channel, profile)


@functools.lru_cache(maxsize=1)
def _warn_unsandboxed(reason: str) -> None:
    log.warning(
        "!!! RUNNING MODEL-WRITTEN CODE WITHOUT A SANDBOX (%s). Only rlimits and a separate uid (when root) "
        "apply: the code can read readable files and reach the network. !!!",
        reason,
    )


class _Slot:
    """A uid of its own for each concurrent sandbox of this process."""

    def __enter__(self) -> int:
        with _slot_lock:
            if not _free_slots:
                raise RuntimeError(f"more than {_SLOTS} concurrent sandboxes in one process")
            self.slot = _free_slots.pop()
        return _UID_BASE + _SLOTS * os.getpid() + self.slot

    def __exit__(self, *exc):
        with _slot_lock:
            _free_slots.append(self.slot)


def _prlimit_args(limits: SandboxLimits) -> list[str]:
    mb = 1024 * 1024
    cpu = limits.cpu_seconds
    return [
        "prlimit",
        f"--as={limits.memory_mb * mb}",
        f"--cpu={cpu}:{cpu + 1}",  # soft: SIGXCPU, hard one second later: SIGKILL
        f"--fsize={limits.file_mb * mb}",
        f"--nofile={limits.nofile}",
        f"--nproc={limits.nproc}",
        "--core=0",
        "--",
    ]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run_bwrap(args, files, stdin, limits, channel, profile=STDLIB) -> RunResult:
    exe, prefix = interpreter()
    cmd = _system_mounts()
    if not prefix.startswith("/usr/"):
        # The interpreter may live in a private home (pyenv under /root, mode 0700): create the path's
        # directories empty and traversable in the sandbox, then bind only the interpreter's prefix.
        parts = prefix.strip("/").split("/")
        for i in range(1, len(parts)):
            cmd += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    # after the private /tmp: a profile's directory under the host's /tmp (a venv in a `mktemp -d`
    # checkout) is bound read-only on top of it instead of being hidden by it
    cmd += profile.bwrap_binds(visible=("/usr", prefix))
    return _bwrap_run(cmd, files, dict(profile.env), [exe, *profile.python_args(), *args], stdin, limits, channel)


def _system_mounts() -> list[str]:
    """The start of every bwrap command: read-only /usr and the root's bin/lib links or directories."""
    cmd = ["bwrap", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink("/" + link):
            cmd += ["--symlink", os.readlink("/" + link), "/" + link]
        elif os.path.isdir("/" + link):
            cmd += ["--ro-bind", "/" + link, "/" + link]
    return cmd


def _bwrap_run(cmd: list[str], files: dict[str, bytes], env: dict[str, str], argv: list[str], stdin, limits,
               channel) -> RunResult:  # fmt: skip
    """The common end of every bwrap command (mounts already in `cmd`, the private /tmp among them):
    `files` as memfd-backed files in /tmp, a read-only root, a clean environment (HOME, PATH, LANG, then
    `env`), new pid/net/ipc/uts namespaces, a fresh uid without capabilities (root host) or a user
    namespace (unprivileged host), resource limits; then runs `argv` and collects its output."""
    fds = []
    try:
        for name, data in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"sandbox file names must be plain names, got {name!r}")
            fds.append(_memfd(name, data))
            cmd += ["--perms", "0644", "--file", str(fds[-1]), f"/tmp/{name}"]
        cmd += ["--chdir", "/tmp", "--remount-ro", "/", "--clearenv"]
        for key, value in {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **env}.items():
            cmd += ["--setenv", key, value]
        cmd += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        cmd += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        with _Slot() as uid:
            if os.geteuid() == 0:
                cmd += ["--"] + _prlimit_args(limits)
                cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
                cmd += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
            else:  # unprivileged host: a user namespace, the caller's uid, no way back into namespaces
                cmd[1:1] = ["--unshare-user", "--disable-userns"]
                cmd += ["--"] + _prlimit_args(limits)
            cmd += argv
            file_fds = tuple(fds)
            info_r, info_w = os.pipe()  # bwrap reports the host pid of the namespace's init here
            fds.append(info_r)
            cmd[1:1] = ["--info-fd", str(info_w)]
            return collect(cmd, stdin, limits, (*file_fds, info_w), channel, None, True, info_w, info_r)
    finally:
        for fd in fds:
            os.close(fd)


def _run_rlimit_only(args, files, stdin, limits, channel, profile=STDLIB) -> RunResult:
    exe, _ = interpreter()
    with tempfile.TemporaryDirectory(prefix="covey-unsandboxed-") as tmp, _Slot() as uid:
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        cmd = _prlimit_args(limits) if shutil.which("prlimit") else []
        if os.geteuid() == 0 and shutil.which("setpriv"):
            os.chown(tmp, uid, uid)
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]
        cmd += [exe, *profile.python_args(), *args]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8", **dict(profile.env)}
        return collect(cmd, stdin, limits, (), channel, (tmp, env), False, None, None)
