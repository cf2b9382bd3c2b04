"""A wall-clock limit for reward calls that run in the calling process (`RewardSpec.in_process`).

``with time_limit(5.0): fn()`` raises `CallTimeout` inside ``fn`` once 5 s have passed. A watchdog
thread waits out the limit and then sends a private real-time signal (SIGRTMAX - 2) to the main
thread with ``pthread_kill``; that signal's handler raises `CallTimeout` there. Why not
``signal.alarm`` / ``setitimer``: math-verify (the ``math`` reward) arms and cancels its own alarm on
every parse (``alarm(0)``), which would silently cancel ours; a signal nobody else uses cannot clash.
`CallTimeout` derives from BaseException so a reward's ``except Exception`` does not swallow it.

Limits, by design of Python signals: the handler runs between bytecodes, so a call stuck inside one
long C function (a catastrophic regex) is stopped only when that function returns; a reward that
catches BaseException defeats the limit. Signal handlers exist only in the main thread, so off the
main thread the call runs WITHOUT a limit (`time_limit` yields False). Worker processes need none
of this: the parent kills a worker whose call overruns.

`exit_intercepted` guards the same calls against ``os._exit``, which skips every ``finally``,
``atexit`` and checkpoint: while an in-process reward runs, ``os._exit`` (and ``posix._exit``) raise
`ProcessExit` instead, in whichever thread of this process calls them, and the call counts as
having raised it even if the reward catches it. A fork's child (multiprocessing) still exits for real.
What it cannot stop: a signal that kills the process (SIGKILL, a segfault), or ``_exit`` through
ctypes; those end the run with a nonzero status, never silently with 0.

`capped_prints` keeps what a reward call prints (``print``, ``sys.stdout/stderr``) to
`PRINT_LIMIT` bytes per stream and call, then one line saying how much was dropped: a reward that
prints every completion must not write gigabytes of log. `Children` finds the processes an
in-process reward left running, so the runner can end them with the run.
"""

from __future__ import annotations

import contextlib
import os
import posix
import signal
import sys
import threading

__all__ = ["PRINT_LIMIT", "CallTimeout", "Children", "ProcessExit", "capped_prints", "exit_intercepted", "time_limit"]

PRINT_LIMIT = 64 * 1024

_SIGNAL = signal.SIGRTMAX - 2
_active: _Limit | None = None  # the limit of the call now running in the main thread
_installed = False


class CallTimeout(BaseException):
    """The call ran past its limit (raised inside the call, in the main thread)."""


class _Limit:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.fired = False
        self.open = True
        self.lock = threading.Lock()

    def fire(self) -> None:  # in the watchdog thread
        with self.lock:
            if self.open:
                self.fired = True
                signal.pthread_kill(threading.main_thread().ident, _SIGNAL)


def _on_signal(signum, frame) -> None:
    limit = _active
    if limit is not None and limit.fired:
        raise CallTimeout(f"the call did not return within {limit.timeout_s} s")
    # otherwise a late signal of a call that already returned: ignore it


@contextlib.contextmanager
def time_limit(timeout_s: float):
    """Raise `CallTimeout` in the body after `timeout_s` seconds; yields False (no limit) off the main thread."""
    global _active, _installed
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    if not _installed:  # stays installed: it ignores the signal unless a limited call is running
        signal.signal(_SIGNAL, _on_signal)
        _installed = True
    limit = _Limit(timeout_s)
    timer = threading.Timer(timeout_s, limit.fire)
    timer.daemon = True
    _active = limit
    timer.start()
    try:
        yield True
    finally:
        _active = None  # first: from here on a late signal is ignored
        with limit.lock:
            limit.open = False
        timer.cancel()


class ProcessExit(BaseException):
    """``os._exit`` was called while an in-process reward ran (the process was kept alive)."""


_real_exit = os._exit


@contextlib.contextmanager
def exit_intercepted():
    """Within the body, ``os._exit(n)`` raises `ProcessExit` in the calling thread instead of ending
    this process; after the body, `ProcessExit` is raised if any call was made (caught or not)."""
    owner, calls = os.getpid(), []

    def intercepted(status):
        if os.getpid() != owner:  # a forked child of the reward: exit as asked
            _real_exit(status)
        calls.append(status)
        raise ProcessExit(f"os._exit({status!r}) was called, which would have ended the run without a checkpoint")

    os._exit = posix._exit = intercepted
    try:
        yield
    finally:
        os._exit = posix._exit = _real_exit
    if calls:
        raise ProcessExit(f"os._exit({calls[0]!r}) was called, which would have ended the run without a checkpoint")


class _Capped:
    """A text stream that passes the first `limit` characters to `stream`, then drops the rest."""

    def __init__(self, stream, limit: int, label: str):
        self.stream, self.left, self.label, self.dropped = stream, limit, label, 0

    def write(self, text: str) -> int:
        if self.left > 0:
            self.stream.write(text[: self.left])
        self.dropped += max(0, len(text) - self.left)
        self.left = max(0, self.left - len(text))
        return len(text)

    def close_note(self) -> None:
        if self.dropped:
            self.stream.write(f"\n[covey: reward {self.label!r} printed {self.dropped} more characters in this call; "
                              f"dropped (at most {PRINT_LIMIT} per call are kept)]\n")

    def __getattr__(self, name):  # flush, fileno, isatty, encoding, ...: the real stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def capped_prints(label: str, limit: int = PRINT_LIMIT):
    """Within the body, sys.stdout and sys.stderr keep `limit` characters each (see module docstring)."""
    out, err = _Capped(sys.stdout, limit, label), _Capped(sys.stderr, limit, label)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out.stream, err.stream
        out.close_note()
        err.close_note()


def _child_pids(pid: int) -> set[int]:
    found = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(c) for c in f.read().split())
    except OSError:
        pass
    return found


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat): a reused pid has another."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


class Children:
    """Processes started by in-process reward calls and still running after them (Linux /proc)."""

    def __init__(self):
        self.left: dict[int, str | None] = {}  # pid -> start time

    @contextlib.contextmanager
    def watch(self):
        before = _child_pids(os.getpid())
        try:
            yield
        finally:
            for pid in _child_pids(os.getpid()) - before:
                self.left[pid] = _start_time(pid)

    def kill(self) -> None:
        """SIGKILL each one still running (and still ours), with its own children and process group."""
        for pid, start in self.left.items():
            if start is None or _start_time(pid) != start:
                continue  # gone, or the pid now names another process
            todo = [pid]
            while todo:
                p = todo.pop()
                todo.extend(_child_pids(p))
                with contextlib.suppress(OSError):
                    if os.getpgid(p) == p:
                        os.killpg(p, signal.SIGKILL)
                    os.kill(p, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
        self.left.clear()
