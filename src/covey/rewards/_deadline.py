"""A wall-clock limit for reward calls that run in the calling process (`RewardSpec.in_process`).

``with time_limit(5.0): fn()`` raises `CallTimeout` inside ``fn`` once 5 s have passed. A watchdog
thread waits out the limit. In the main thread it then sends a private real-time signal (SIGRTMAX - 2)
with ``pthread_kill``; that signal's handler raises `CallTimeout` there (and the signal also ends a
blocking sleep or read). Why not ``signal.alarm`` / ``setitimer``: math-verify (the ``math`` reward) arms
and cancels its own alarm on every parse (``alarm(0)``), which would silently cancel ours; a signal
nobody else uses cannot clash. Signal handlers exist only in the main thread, so in any other thread
(the thread executor's generator runs rewards there) the watchdog sets `CallTimeout` as that thread's
asynchronous exception (``PyThreadState_SetAsyncExc``); a late one, set as the call returned, is
cleared before the limit ends. `CallTimeout` derives from BaseException so a reward's ``except
Exception`` does not swallow it.

Limits, by design of Python: the exception is raised between bytecodes, so a call stuck inside one
long C function (a catastrophic regex) is stopped only when that function returns, and off the main
thread a blocking sleep or read is not cut short either (the runner then stops waiting for the call,
`abandon_after`); a reward that catches BaseException defeats the limit. Worker processes need none
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
import ctypes
import os
import posix
import signal
import sys
import threading

__all__ = ["PRINT_LIMIT", "CallTimeout", "Children", "ProcessExit", "abandon_after", "capped_prints", "exit_intercepted",
           "time_limit"]

PRINT_LIMIT = 64 * 1024

_SIGNAL = signal.SIGRTMAX - 2
_active: _Limit | None = None  # the limit of the call now running in the main thread
_installed = False


class CallTimeout(BaseException):
    """The call ran past its limit (raised inside the call, in the main thread)."""


def _set_async(ident: int, exc) -> None:
    """Raise `exc` (a class; None clears a pending one) in thread `ident` at its next bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc) if exc else None)


class _Limit:
    def __init__(self, timeout_s: float, ident: int | None = None):
        self.timeout_s = timeout_s
        self.ident = ident  # None: the main thread (a signal); else that thread (an asynchronous exception)
        self.fired = False
        self.open = True
        self.lock = threading.Lock()

    def fire(self) -> None:  # in the watchdog thread
        with self.lock:
            if self.open:
                self.fired = True
                if self.ident is None:
                    signal.pthread_kill(threading.main_thread().ident, _SIGNAL)
                else:
                    _set_async(self.ident, CallTimeout)

    def close(self) -> None:  # in the limited thread, once the call is over
        with self.lock:
            self.open = False
            if self.fired and self.ident is not None:
                _set_async(self.ident, None)  # set as the call returned: not raised later in the caller


def _on_signal(signum, frame) -> None:
    limit = _active
    if limit is not None and limit.fired:
        raise CallTimeout(f"the call did not return within {limit.timeout_s} s")
    # otherwise a late signal of a call that already returned: ignore it


@contextlib.contextmanager
def time_limit(timeout_s: float):
    """Raise `CallTimeout` in the body after `timeout_s` seconds, in whichever thread runs it."""
    global _active, _installed
    if threading.current_thread() is not threading.main_thread():
        limit = _Limit(timeout_s, threading.get_ident())
        timer = threading.Timer(timeout_s, limit.fire)
        timer.daemon = True
        timer.start()
        try:
            yield True
        finally:
            timer.cancel()
            limit.close()
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
        limit.close()
        timer.cancel()


def abandon_after(fn, wait_s: float):
    """``(True, fn())`` when `fn` returns (or raises) within `wait_s` seconds in a helper thread, else
    ``(False, None)``: the caller goes on and the helper is left behind (a daemon). For calls off the main
    thread that `time_limit` cannot cut short (blocked in a sleep or a read)."""
    box: dict = {}

    def run():
        try:
            box["out"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller as raised
            box["err"] = e

    helper = threading.Thread(target=run, name="covey-reward-call", daemon=True)
    helper.start()
    helper.join(wait_s)
    if helper.is_alive():
        return False, None
    if "err" in box:
        raise box["err"]
    return True, box["out"]


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
