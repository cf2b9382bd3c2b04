"""Run untrusted Python (model-written code) in a bubblewrap sandbox.

What the sandbox gives each program: no network (own network namespace), its own pid namespace
(it sees only its own processes; when it ends, everything it started is killed), read-only /usr and
interpreter, no /etc, no home directory, a private size-limited tmpfs /tmp as working directory, a
fresh unprivileged uid with no capabilities, and rlimits on address space, CPU time, file size,
open files and processes; the host enforces the wall time and keeps at most `max_output_bytes` of
each output stream. Where bubblewrap cannot run, nothing is executed unless the caller opts into an
rlimit-only mode (``allow_unsandboxed=True`` or env ``COVEY_ALLOW_UNSANDBOXED=1``), which logs a loud
warning: that mode does not hide files or the network.

Not covered: memory summed over processes (RLIMIT_AS is per process, so the worst case is
nproc x memory_mb), CPU summed over processes, and kernel exploits. Code rewards live in
`covey.rewards.code`; tests against a program in `testing.py`.
"""

from __future__ import annotations

import dataclasses

from ._process import execute, sandbox_status
from .limits import RunResult, SandboxLimits, SandboxUnavailable
from .testing import CodeTests, TestReport, run_tests

__all__ = [
    "CodeTests",
    "RunResult",
    "SandboxLimits",
    "SandboxUnavailable",
    "TestReport",
    "run",
    "run_tests",
    "sandbox_status",
]


def run(
    code: str,
    stdin: str = "",
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    *,
    limits: SandboxLimits | None = None,
    allow_unsandboxed: bool | None = None,
) -> RunResult:
    """Run `code` as a script (``python -I -B -S main.py``, stdlib only) in the sandbox, feeding it `stdin`.

    `limits` sets every limit (default `SandboxLimits()`: 10 s wall, 512 MB); `timeout_s` and
    `memory_mb`, when given, override it. Raises SandboxUnavailable where bubblewrap cannot run
    (unless the rlimit-only mode is allowed).

    >>> r = run("print(input()[::-1])", stdin="abc\\n")
    >>> r.exit_code, r.stdout, r.timed_out
    (0, 'cba\\n', False)
    """
    lim = limits or SandboxLimits()
    if timeout_s is not None:
        lim = dataclasses.replace(lim, timeout_s=timeout_s)
    if memory_mb is not None:
        lim = dataclasses.replace(lim, memory_mb=memory_mb)
    return execute(["main.py"], {"main.py": code.encode("utf-8")}, stdin.encode("utf-8"), lim,
                   allow_unsandboxed=allow_unsandboxed)
