"""Spawn one sandbox command, feed it, read its output under the limits, and tear it down.

The host reads stdout/stderr itself (keeping the first `max_output_bytes` of each), enforces the
wall time, and on timeout kills the pid namespace's init (the kernel then kills everything inside)
and bwrap's process group. It returns only after the namespace is empty (see `_NamespaceInit`).
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import subprocess
import time

from .limits import RunResult, SandboxLimits

__all__ = ["collect"]


def collect(
    cmd: list[str],
    stdin: bytes,
    limits: SandboxLimits,
    pass_fds: tuple[int, ...],
    channel: bool,
    cwd_env: tuple[str, dict] | None,
    sandboxed: bool,
    close_after_spawn: int | None,
    info: int | None,
) -> RunResult:
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
