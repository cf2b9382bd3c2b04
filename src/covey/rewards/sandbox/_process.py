"""Start one program under bubblewrap (or, by explicit opt-in, under rlimits only) and collect it.

The layers, outermost first (root host)::

    bwrap  (mount/pid/net/ipc/uts namespaces; read-only /usr and interpreter; tmpfs /tmp; no /etc, no home)
      prlimit  (RLIMIT_AS, CPU, FSIZE, NOFILE, NPROC, CORE; inherited by everything below)
        setpriv  (a fresh unprivileged uid/gid, no groups, no capabilities, no_new_privs)
          python -I -B -S <file>   (isolated, stdlib only: site-packages cost ~50 ms per start)

Each call gets its own uid (1_000_000 + 64 * pid + slot) so RLIMIT_NPROC, which counts processes per
uid, is not shared between concurrent sandboxes. A non-root host cannot switch uid: there bwrap makes a
user namespace instead and the code keeps the caller's (already unprivileged) uid.

The host reads stdout/stderr itself (keeping the first `max_output_bytes` of each), enforces the wall
time, and on timeout kills bwrap's whole process group; ``--die-with-parent`` and the pid namespace
take every process inside with it (when the namespace's pid 1 dies the kernel kills the rest).
This module knows nothing about tests or rewards (see `testing.py` and `covey.rewards.code`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

__all__ = ["RunResult", "SandboxLimits", "SandboxUnavailable", "sandbox_status"]

log = logging.getLogger(__name__)

_UID_BASE = 1_000_000
_SLOTS = 64
_slot_lock = threading.Lock()
_free_slots = list(range(_SLOTS))


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here and the caller did not opt into the weaker rlimit-only mode."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one sandboxed program.

    timeout_s: wall-clock limit; the whole process tree is killed when it passes.
    cpu_s: CPU-seconds per process (RLIMIT_CPU); None = ceil(timeout_s).
    memory_mb: address space per process (RLIMIT_AS).
    file_mb: largest file a process may write (RLIMIT_FSIZE).
    tmpfs_mb: size of the private writable /tmp (the working directory).
    nproc: processes/threads the sandbox uid may have (RLIMIT_NPROC).
    nofile: open file descriptors per process (RLIMIT_NOFILE).
    max_output_bytes: bytes of stdout and of stderr kept; the rest is read and dropped.
    max_drain_bytes: total output after which the program is killed (limit_hit="output").
    """

    timeout_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 512
    file_mb: int = 16
    tmpfs_mb: int = 64
    nproc: int = 16
    nofile: int = 64
    max_output_bytes: int = 64 * 1024
    max_drain_bytes: int = 8 * 1024 * 1024

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "file_mb", "tmpfs_mb", "nproc", "nofile", "max_output_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {value!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"SandboxLimits.cpu_s must be > 0 or None, got {self.cpu_s!r}")

    @property
    def cpu_seconds(self) -> int:
        return max(1, int(-(-(self.cpu_s or self.timeout_s) // 1)))


@dataclass
class RunResult:
    """What a sandboxed program did.

    exit_code: the program's exit status; 128+signal when a signal killed it; -9 when the host killed
        it (timeout, output flood).
    timed_out: the wall-clock limit passed.
    limit_hit: best-effort name of the limit that stopped it: "timeout", "cpu", "memory", "file_size",
        "processes", "output", or None.
    sandboxed: False only in the explicit rlimit-only mode.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    limit_hit: str | None = None
    sandboxed: bool = True
    elapsed_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    channel: bytes = b""  # what the program wrote to its result descriptor (run_tests' harness)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


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
) -> RunResult:
    """Run ``python -I -B -S *args`` (stdlib only: no site-packages) with `files` (name -> bytes) in a fresh working directory.

    With `channel`, a pipe's write end is passed in and its number appended to `args`; what the
    program writes there comes back in `RunResult.channel` (read while it runs, so it never blocks).
    """
    ok, reason = sandbox_status()
    if ok:
        return _run_bwrap(args, files, stdin, limits, channel)
    if not unsandboxed_allowed(allow_unsandboxed):
        raise SandboxUnavailable(
            f"cannot sandbox code here: {reason}. Install bubblewrap (apt-get install bubblewrap), or accept "
            "a much weaker rlimit-only mode (no namespaces: the code can read your files and use the network) "
            "with allow_unsandboxed=True or COVEY_ALLOW_UNSANDBOXED=1."
        )
    _warn_unsandboxed(reason)
    return _run_rlimit_only(args, files, stdin, limits, channel)


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


def _run_bwrap(args, files, stdin, limits, channel) -> RunResult:
    exe, prefix = interpreter()
    cmd = ["bwrap", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink("/" + link):
            cmd += ["--symlink", os.readlink("/" + link), "/" + link]
        elif os.path.isdir("/" + link):
            cmd += ["--ro-bind", "/" + link, "/" + link]
    if not prefix.startswith("/usr/"):
        # The interpreter may live in a private home (pyenv under /root, mode 0700): create the path's
        # directories empty and traversable in the sandbox, then bind only the interpreter's prefix.
        parts = prefix.strip("/").split("/")
        for i in range(1, len(parts)):
            cmd += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    fds = []
    try:
        for name, data in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"sandbox file names must be plain names, got {name!r}")
            fd = _memfd(name, data)
            fds.append(fd)
            cmd += ["--perms", "0644", "--file", str(fd), f"/tmp/{name}"]
        cmd += ["--chdir", "/tmp", "--remount-ro", "/", "--clearenv"]
        cmd += ["--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8"]
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
            cmd += [exe, "-I", "-B", "-S", *args]
            file_fds = tuple(fds)
            info_r, info_w = os.pipe()  # bwrap reports the host pid of the namespace's init here
            fds.append(info_r)
            cmd[1:1] = ["--info-fd", str(info_w)]
            return _collect(cmd, stdin, limits, (*file_fds, info_w), channel, None, True, info_w, info_r)
    finally:
        for fd in fds:
            os.close(fd)


def _run_rlimit_only(args, files, stdin, limits, channel) -> RunResult:
    exe, _ = interpreter()
    with tempfile.TemporaryDirectory(prefix="covey-unsandboxed-") as tmp, _Slot() as uid:
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        cmd = _prlimit_args(limits) if shutil.which("prlimit") else []
        if os.geteuid() == 0 and shutil.which("setpriv"):
            os.chown(tmp, uid, uid)
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]
        cmd += [exe, "-I", "-B", "-S", *args]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8"}
        return _collect(cmd, stdin, limits, (), channel, (tmp, env), False, None, None)


def _collect(cmd, stdin, limits, pass_fds, channel, cwd_env, sandboxed, close_after_spawn, info) -> RunResult:
    """Spawn `cmd`, feed stdin, read outputs (and the channel) under the limits, kill on timeout.

    `close_after_spawn`: our copy of a descriptor only the child should hold; `info`: read end of
    bwrap's --info-fd pipe (None in rlimit-only mode).
    """
    start = time.monotonic()
    cwd, env = cwd_env if cwd_env else (None, None)
    chan_r = chan_w = None
    if channel:
        chan_r, chan_w = os.pipe()
        cmd = [*cmd, str(chan_w)]
        pass_fds = (*pass_fds, chan_w)
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=pass_fds,
            start_new_session=True,  # its own process group, so one killpg ends the tree
            cwd=cwd,
            env=env,
        )
    except BaseException:
        if channel:
            os.close(chan_r)
        raise
    finally:
        if chan_w is not None:
            os.close(chan_w)  # only the program holds the write end now: EOF when it is gone
        if close_after_spawn is not None:
            os.close(close_after_spawn)
    chan = open(chan_r, "rb", buffering=0) if channel else None
    init = _NamespaceInit(info) if info is not None else None
    keep = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    truncated = {proc.stdout: False, proc.stderr: False}
    channel_data = bytearray()
    drained, timed_out, flooded = 0, False, False
    pending = memoryview(stdin)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    if chan is not None:
        sel.register(chan, selectors.EVENT_READ)
    if init is not None:
        sel.register(info, selectors.EVENT_READ)
    if pending:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    deadline = start + limits.timeout_s
    try:
        while any(f in sel.get_map() for f in (proc.stdout, proc.stderr, chan) if f is not None):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=left):
                f = key.fileobj
                if f is info:
                    if init.poll():
                        sel.unregister(f)
                    continue
                if f is proc.stdin:
                    try:
                        n = os.write(f.fileno(), pending[:65536])
                    except (BrokenPipeError, OSError):
                        n = len(pending)  # the program stopped reading: drop the rest
                    pending = pending[n:]
                    if not pending:
                        sel.unregister(f)
                        f.close()
                    continue
                chunk = os.read(f.fileno(), 65536)
                if not chunk:
                    sel.unregister(f)
                    continue
                if f is chan:
                    channel_data += chunk
                    if len(channel_data) > limits.max_drain_bytes:
                        flooded = True
                        break
                    continue
                buf = keep[f]
                room = limits.max_output_bytes - len(buf)
                if room > 0:
                    buf += chunk[:room]
                if len(chunk) > room:
                    truncated[f] = True
                drained += len(chunk)
                if drained > limits.max_drain_bytes:
                    flooded = True
                    break
            if flooded:
                break
        if timed_out or flooded:
            _kill_group(proc, init)
        else:  # both pipes closed; the program may still linger a moment (or have detached its output)
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc, init)
    finally:
        sel.close()
        for f in (proc.stdin, proc.stdout, proc.stderr, chan):
            if f is not None and not f.closed:
                f.close()
        if proc.poll() is None:
            _kill_group(proc, init)
        if init is not None:
            init.wait_gone(5.0)
    code = proc.returncode
    if code < 0:  # killed by us: report the shell's convention for the signal
        code = 128 - code if not (timed_out or flooded) else -9
    stdout = keep[proc.stdout].decode("utf-8", "replace")
    stderr = keep[proc.stderr].decode("utf-8", "replace")
    res = RunResult(
        exit_code=code,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        sandboxed=sandboxed,
        elapsed_s=time.monotonic() - start,
        stdout_truncated=truncated[proc.stdout],
        stderr_truncated=truncated[proc.stderr],
        channel=bytes(channel_data),
    )
    res.limit_hit = _which_limit(res, flooded)
    return res


class _NamespaceInit:
    """The sandbox's pid-namespace init, from bwrap's --info-fd JSON.

    bwrap exits as soon as the program's exit status is known, while the init may still be tearing
    the namespace down. The kernel's teardown (zap_pid_ns_processes) kills every process in the
    namespace and waits until all are freed before the init counts as exited, so once a pidfd on the
    init is readable nothing the program started is left.
    """

    def __init__(self, fd: int):
        self.fd, self.buf, self.pid, self.pidfd = fd, b"", None, None

    def poll(self) -> bool:
        """Read what bwrap wrote; True once the pid is known (or the pipe closed)."""
        if self.pid is not None:
            return True
        os.set_blocking(self.fd, False)
        eof = False
        try:
            while True:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    eof = True
                    break
                self.buf += chunk
        except BlockingIOError:
            pass
        try:
            self.pid = int(json.loads(self.buf.decode())["child-pid"])
        except (ValueError, KeyError, TypeError):
            return eof
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except OSError:  # already gone
            self.pidfd = None
        return True

    def kill(self) -> None:
        self.poll()
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait_gone(self, timeout: float) -> None:
        self.poll()
        if self.pidfd is not None:
            select.select([self.pidfd], [], [], timeout)
            os.close(self.pidfd)
            self.pidfd = None


def _kill_group(proc: subprocess.Popen, init: _NamespaceInit | None) -> None:
    """Kill the sandbox: its namespace's init first (the kernel then kills everything inside),
    then bwrap's process group; returns once bwrap is reaped (the caller waits for the init)."""
    if init is not None:
        init.kill()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _which_limit(res: RunResult, flooded: bool) -> str | None:
    if res.timed_out:
        return "timeout"
    if flooded:
        return "output"
    if res.exit_code in (128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        return "cpu"  # nothing else inside sends SIGKILL to the program's own tree
    tail = res.stderr[-2000:]
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return "memory"
    if "File too large" in tail or "No space left on device" in tail:
        return "file_size"
    if "Resource temporarily unavailable" in tail and ("fork" in tail or "BlockingIOError" in tail):
        return "processes"
    return None
