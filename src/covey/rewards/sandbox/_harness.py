"""Test harness that runs INSIDE the sandbox (a script: stdlib only, never imported by covey).

Reads a JSON spec from stdin ``{"setup", "code", "asserts": [...], "io": [[stdin, stdout], ...],
"timeout_s"}``, runs each test in a forked child and writes one JSON line per test to the result
file descriptor given as argv[1]: ``{"i", "passed", "status", "message"}``; status is one of
pass, fail, error, timeout, crash.

Why a fork per test: the harness itself never runs model code, so code that exits early
(``os._exit(0)``, ``sys.exit()``) or prints fake markers cannot report a pass. A child passes only
by writing a random per-test token after the test ran to the end. The harness is made non-dumpable
so children (same uid) cannot reopen its descriptors through /proc. Code and test share one
interpreter, so code that inspects the harness's frames could still forge a token: this blocks
cheap reward hacks, not a determined adversary (containment is the sandbox's job).
"""

import ctypes
import io
import json
import os
import resource
import select
import signal
import sys
import traceback

PR_SET_DUMPABLE = 4
MAX_MESSAGE = 300
MAX_IO_OUTPUT = 4 * 1024 * 1024


def _normalise_output(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _short_error(exc):
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-MAX_MESSAGE:]


def _child(spec, kind, test, token, w, result_fd, paths):
    os.close(result_fd)
    os.setpgid(0, 0)
    cpu = max(1, int(-(-spec["timeout_s"] // 1)))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if kind == "io":
        in_path, out_path = paths
        fd_in = os.open(in_path, os.O_RDONLY)
        os.dup2(fd_in, 0)
        fd_out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd_out, 1)
        os.close(fd_in)
        os.close(fd_out)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    else:
        fd_null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd_null, 0)
        os.close(fd_null)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    g = {"__name__": "__main__" if kind == "io" else "solution", "__builtins__": __builtins__}
    outcome = b"E"
    try:
        exec(compile(spec["setup"], "<setup>", "exec"), g)
        exec(compile(spec["code"], "<solution>", "exec"), g)
        if kind == "assert":
            exec(compile(test, "<test>", "exec"), g)
        outcome = token
    except SystemExit as e:
        if kind == "io" and e.code in (None, 0):
            outcome = token
        else:
            outcome = b"E" + f"SystemExit({e.code!r}) before the test finished".encode()[:MAX_MESSAGE]
    except BaseException as e:  # noqa: BLE001 - anything the code raises is a failed test
        traceback.print_exc(limit=-4)
        kind_tag = b"F" if isinstance(e, AssertionError) else b"E"
        outcome = kind_tag + _short_error(e).encode("utf-8", "replace")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a closed or broken stdout must not hide the outcome
        pass
    try:
        os.write(w, outcome)
    finally:
        os._exit(0)


def _wait_child(pid, r, timeout_s):
    """(bytes the child reported, timed_out): waits for the child's exit, not for EOF on `r`."""
    pidfd = os.pidfd_open(pid)
    data, timed_out = b"", False
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
        if not ready:
            timed_out = True
        os.set_blocking(r, False)
        while True:
            try:
                chunk = os.read(r, 65536)
            except BlockingIOError:
                break
            if not chunk or len(data) > 65536:
                break
            data += chunk
    finally:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()  # the test's leftover processes die before the next test starts
            except (ProcessLookupError, PermissionError):
                pass
        os.waitpid(pid, 0)
        os.close(pidfd)
    return data, timed_out


def _run_one(spec, kind, test, result_fd, i):
    token = os.urandom(16).hex().encode()
    paths = None
    expected = None
    if kind == "io":
        stdin_text, expected = test
        paths = (f"/tmp/.covey_in_{i}", f"/tmp/.covey_out_{i}")
        with open(paths[0], "w") as f:
            f.write(stdin_text)
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _child(spec, kind, test, token, w, result_fd, paths)
        finally:
            os._exit(0)
    os.close(w)
    data, timed_out = _wait_child(pid, r, spec["timeout_s"])
    os.close(r)
    if timed_out:
        status, message = "timeout", f"test did not finish within {spec['timeout_s']} s"
    elif data == token:
        status, message = "pass", ""
        if kind == "io":
            try:
                with open(paths[1], "rb") as f:
                    got = f.read(MAX_IO_OUTPUT).decode("utf-8", "replace")
            except OSError:
                got = ""
            if _normalise_output(got) != _normalise_output(expected):
                status = "fail"
                message = f"expected {_normalise_output(expected)[:120]!r}, got {_normalise_output(got)[:120]!r}"
    elif data[:1] in (b"E", b"F"):
        status = "fail" if data[:1] == b"F" else "error"
        message = data[1:].decode("utf-8", "replace")[:MAX_MESSAGE]
    else:
        status, message = "crash", "the program ended without finishing the test (killed, out of memory or exited)"
    if paths:
        for p in paths:
            try:
                os.unlink(p)
            except OSError:
                pass
    return {"i": i, "passed": status == "pass", "status": status, "message": message}


def main():
    result_fd = int(sys.argv[1])
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    tests = [("assert", t) for t in spec["asserts"]] + [("io", t) for t in spec["io"]]
    try:
        compile(spec["setup"], "<setup>", "exec")
        compile(spec["code"], "<solution>", "exec")
        syntax_error = None
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        syntax_error = _short_error(e)
    for i, (kind, test) in enumerate(tests):
        if syntax_error is not None:
            res = {"i": i, "passed": False, "status": "error", "message": syntax_error}
        else:
            res = _run_one(spec, kind, test, result_fd, i)
        os.write(result_fd, (json.dumps(res) + "\n").encode())


if __name__ == "__main__":
    main()
