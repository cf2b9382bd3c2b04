"""Run a program against tests in the sandbox: assert-style tests (MBPP, HumanEval) and stdin/stdout cases.

All tests of one program run in ONE sandbox: the in-sandbox harness (`_harness.py`) forks a trusted
test process per test and starts the program once, in its own interpreter, which the tests call
with plain data (docs/sandbox.md), so a program pays the bubblewrap + interpreter start-up once. Each test has its own time limit
(`timeout_s`); the sandbox as a whole gets ``n_tests * timeout_s + startup_s``. Tests that never
reported (the whole sandbox was killed) count as failed with status "timeout".

Test formats (`CodeTests.coerce` accepts any of them):
    ["assert f(1) == 2", ...]                                   assert statements
    {"setup": "import math", "asserts": ["assert ..."]}         setup runs before the code
    {"io": [["3 4\\n", "7\\n"], ...]}                            stdin -> expected stdout
    {"setup": prompt, "asserts": [...], "functions": ["f"]}    names the test takes from the program
Outside `functions`, the program cannot redefine a name the test reads as a builtin, a stdlib module
or a setup definition (HumanEval's setup holds checkers such as ``poly``; docs/sandbox.md).
Outputs compare after stripping trailing spaces on each line and trailing blank lines.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from ._process import execute
from .limits import RunResult, SandboxLimits

__all__ = ["CodeTests", "TestReport", "run_tests"]

_HERE = Path(__file__).parent
_PLAIN = (_HERE / "_plain.py").read_bytes()
_FILES = {  # one script each, stdlib only: the plain-data codec in front of the harness / candidate server
    "harness.py": _PLAIN + b"\n" + (_HERE / "_harness.py").read_bytes(),
    "candidate.py": _PLAIN + b"\n" + (_HERE / "_candidate.py").read_bytes(),
}
_STATUSES = ("pass", "fail", "error", "timeout", "crash")


@dataclass(frozen=True)
class CodeTests:
    """The tests of one problem: `setup` code, `asserts` statements, and `io` (stdin, stdout) cases.

    `functions`: the program's entry points, which the tests take from the program even where they
    redefine a builtin (MBPP 126 tests a function named ``sum``) or a setup stub (HumanEval's prompt).
    """

    asserts: tuple[str, ...] = ()
    setup: str = ""
    io: tuple[tuple[str, str], ...] = ()
    functions: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.asserts) + len(self.io)

    @classmethod
    def coerce(cls, obj) -> CodeTests:
        """Build from a CodeTests, a list of assert strings, or a dict with setup/asserts/io."""
        if isinstance(obj, CodeTests):
            return obj
        if isinstance(obj, str):
            return cls(asserts=(obj,))
        if isinstance(obj, dict):
            unknown = set(obj) - {"setup", "asserts", "io", "functions"}
            if unknown:
                raise ValueError(f"tests: unknown keys {sorted(unknown)}; allowed: setup, asserts, io, functions")
            io = []
            for case in obj.get("io") or ():
                if isinstance(case, dict):
                    case = (case.get("input", ""), case.get("output", ""))
                if len(case) != 2:
                    raise ValueError(f"tests.io: each case must be (stdin, expected stdout), got {case!r}")
                io.append((str(case[0]), str(case[1])))
            asserts = obj.get("asserts") or ()
            if isinstance(asserts, str):
                asserts = (asserts,)
            functions = obj.get("functions") or ()
            functions = (functions,) if isinstance(functions, str) else tuple(map(str, functions))
            return cls(asserts=tuple(map(str, asserts)), setup=str(obj.get("setup") or ""), io=tuple(io),
                       functions=functions)
        if isinstance(obj, (list, tuple)) and all(isinstance(t, str) for t in obj):
            return cls(asserts=tuple(obj))
        raise ValueError(
            f"tests must be a list of assert strings or a dict with setup/asserts/io, got {type(obj).__name__}"
        )


@dataclass
class TestReport:
    """Per-test outcome of one program. status values: pass, fail, error, timeout, crash."""

    __test__ = False  # not a pytest class

    passed: list[bool]
    status: list[str]
    messages: list[str]
    run: RunResult | None = field(default=None, repr=False)
    suspect: list[bool] = field(default_factory=list)
    """Per test: the program returned a forged-looking value (a subclass of a plain type, or an object
    with its own __eq__): a likely reward hack, scored as a failure and counted."""

    @property
    def exploit_suspected(self) -> bool:
        return any(self.suspect)

    @property
    def n_passed(self) -> int:
        return sum(self.passed)

    @property
    def fraction(self) -> float:
        """Fraction of tests passed; 0.0 when there are no tests."""
        return self.n_passed / len(self.passed) if self.passed else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.passed) and all(self.passed)


def run_tests(
    code: str,
    tests,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    startup_s: float = 5.0,
    limits: SandboxLimits | None = None,
    allow_unsandboxed: bool | None = None,
) -> TestReport:
    """Run `code` against `tests` (see module docstring) in one sandbox.

    `timeout_s` is per test; `limits` (if given) sets the other limits, its timeout is replaced.

    >>> run_tests("def add(a, b):\\n    return a + b", ["assert add(1, 2) == 3", "assert add(1, 1) == 3"]).passed
    [True, False]
    """
    tests = CodeTests.coerce(tests)
    n = len(tests)
    if n == 0:
        return TestReport(passed=[], status=[], messages=[])
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    base = limits or SandboxLimits(memory_mb=memory_mb)
    total = n * timeout_s + startup_s
    run_limits = dataclasses.replace(base, timeout_s=total, cpu_s=total)
    spec = {
        "setup": tests.setup,
        "functions": list(tests.functions),
        "code": code,
        "asserts": list(tests.asserts),
        "io": [list(c) for c in tests.io],
        "timeout_s": timeout_s,
    }
    res = execute(
        ["harness.py"],
        dict(_FILES),
        json.dumps(spec).encode(),
        run_limits,
        channel=True,
        allow_unsandboxed=allow_unsandboxed,
    )
    passed, status, suspect = [False] * n, ["timeout"] * n, [False] * n
    messages = ["the sandbox stopped before this test reported"] * n
    if res.exit_code != 0 and not res.timed_out:
        messages = [f"harness exited with {res.exit_code}: {res.stderr.strip()[-200:]}"] * n
        status = ["crash"] * n
    records, broken = _verdicts(res.channel, n)
    if broken is not None:  # someone else wrote to the channel: no verdict of this run is trusted
        return TestReport(passed=[False] * n, status=["crash"] * n, messages=[broken] * n, run=res, suspect=[True] * n)
    for i, rec in enumerate(records):
        passed[i] = rec["status"] == "pass"
        status[i] = rec["status"]
        messages[i] = str(rec.get("message", ""))
        suspect[i] = bool(rec.get("suspect", False))
    return TestReport(passed=passed, status=status, messages=messages, run=res, suspect=suspect)


def _verdicts(channel: bytes, n: int) -> tuple[list[dict], str | None]:
    """(the harness's records, None), or ([], why) when the channel is not exactly what it writes.

    The harness writes one complete line per test, in order: line k is ``{"i": k, "status": ...}``.
    Anything else (a second verdict for a test, an index out of order or range, a line that is not a
    record, a partial line) means something other than the harness wrote there: the run is refused.
    """
    if not channel:
        return [], None
    lines = channel.split(b"\n")
    if lines[-1] != b"":
        return [], "the result channel ended in a partial line: no verdict of this run is trusted"
    records = []
    for k, line in enumerate(lines[:-1]):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        ok = isinstance(rec, dict) and k < n and type(rec.get("i")) is int and rec["i"] == k
        if not (ok and rec.get("status") in _STATUSES and rec.get("passed") is (rec["status"] == "pass")):
            return [], f"the result channel carried an unexpected record (line {k + 1}): no verdict of this run is trusted"
        records.append(rec)
    return records, None
