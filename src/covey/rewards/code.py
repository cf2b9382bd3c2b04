"""Code reward: extract the program from a completion and run its tests in the sandbox.

The completion's LAST fenced code block tagged python/py/python3 (or untagged) is the program
(open-r1's `extract_code` also takes the last block); a completion without a closed block scores 0.0.
Tests come from a per-item column (default ``tests``) in any format `CodeTests.coerce` accepts:
a list of assert statements, or ``{"setup", "asserts", "io": [[stdin, stdout], ...]}``. Reward =
fraction of tests passed (``mode="fraction"``) or 1.0 only when all pass (``mode="binary"``).
Sandboxing itself lives in `covey.rewards.sandbox`.
"""

from __future__ import annotations

import re

from covey.rewards._scoring import RewardOutput
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward
from covey.rewards.sandbox import CodeTests, SandboxLimits, run_tests

__all__ = ["CodeReward", "extract_code"]

_FENCE = re.compile(r"```[ \t]*([\w+\-]*)[^\n]*\n(.*?)```", re.DOTALL)
_LANGS = ("python", "py", "python3", "")


def extract_code(text: str) -> str | None:
    """The last closed ```python (or untagged) block of `text`, or None.

    >>> extract_code("Try:\\n```python\\nx = 1\\n```\\nthen\\n```py\\nx = 2\\n```")
    'x = 2\\n'
    >>> extract_code("```js\\nlet x\\n```") is None, extract_code("```python\\ncut off") is None
    (True, True)
    """
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in _LANGS]
    return blocks[-1] if blocks else None


@register_reward("code")
class CodeReward:
    """Fraction of tests passed (or all-pass 1.0/0.0) by the completion's code, run in the sandbox.

    Params: `mode` ("fraction" | "binary"), `timeout_s` (per test), `memory_mb`, `column` (the tests
    column), `allow_unsandboxed` (None = env COVEY_ALLOW_UNSANDBOXED). Samples without tests score None;
    completions without a code block score 0.0. Raises SandboxUnavailable where bubblewrap cannot run
    (the runner counts that as a failure on every sample, so a run cannot silently train on zeros).

    >>> reward = CodeReward()
    >>> reward(prompts=None, completions=["```python\\ndef sq(x):\\n    return x * x\\n```", "no code"],
    ...        tests=[["assert sq(3) == 9", "assert sq(-1) == -1"], ["assert sq(3) == 9"]])
    [0.5, 0.0]
    """

    def __init__(
        self,
        mode: str = "fraction",
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        column: str = "tests",
        allow_unsandboxed: bool | None = None,
    ):
        if mode not in ("fraction", "binary"):
            raise ValueError(f"CodeReward: mode must be 'fraction' or 'binary', got {mode!r}")
        if not timeout_s > 0:
            raise ValueError(f"CodeReward: timeout_s must be > 0, got {timeout_s!r}")
        self.limits = SandboxLimits(memory_mb=memory_mb)  # validates memory_mb
        self.mode, self.timeout_s, self.column = mode, timeout_s, column
        self.allow_unsandboxed = allow_unsandboxed

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        if self.column not in columns:
            raise ValueError(f"CodeReward needs a {self.column!r} column with each item's tests; got {sorted(columns)}")
        out: list[float | None] = []
        suspected: list[float] = []
        for c, tests in zip(completions, columns[self.column]):
            if tests is None:
                out.append(None)
                continue
            tests = CodeTests.coerce(tests)
            code = extract_code(completion_text(c))
            if code is None or len(tests) == 0:
                out.append(0.0 if len(tests) else None)
                suspected.append(0.0)
                continue
            rep = run_tests(code, tests, timeout_s=self.timeout_s, limits=self.limits,
                            allow_unsandboxed=self.allow_unsandboxed)
            out.append(rep.fraction if self.mode == "fraction" else float(rep.all_passed))
            suspected.append(float(rep.exploit_suspected))
        return RewardOutput(out, {"exploit_suspected": suspected})
