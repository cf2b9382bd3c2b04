"""`calculator`: a multi-step arithmetic environment with a calculator tool.

Any task whose items carry an ``answer`` (e.g. ``task: {name: arithmetic, params: {operands: 4}}``)
works: the first messages are a system message describing the tool and the item's prompt. Each turn
the model either calls the tool, ``<tool_call>{"name": "calculator", "arguments": {"expression":
"12*3"}}</tool_call>`` (Qwen/Hermes format), and gets the result as a tool message, or answers: a
turn without a tool call is the final answer (last number, checked like the arithmetic task), reward
1.0 or 0.0, terminated. A malformed call, an unknown tool or a bad expression comes back as a tool
error message (counted in ``info["tool_errors"]``); a turn whose calls are all malformed is invalid.
"""

from __future__ import annotations

import copy

from covey.envs.base import Action, StepResult, register_env
from covey.envs.tools import CALCULATOR_SCHEMA, answer_tool_calls, calculate
from covey.rewards.math import extract_answer, math_equal

__all__ = ["CalculatorEnv", "SYSTEM"]

SYSTEM = ("You can use a calculator. To call it, write "
          '<tool_call>{"name": "calculator", "arguments": {"expression": "2*(3+4)"}}</tool_call> '
          "and wait for the result. When you know the answer, reply with the number only.")  # fmt: skip


@register_env("calculator")
class CalculatorEnv:
    """Arithmetic with a calculator tool; `max_calls` tool turns at most (then truncated)."""

    tools = [CALCULATOR_SCHEMA]

    def __init__(self, *, max_calls: int = 4, system_prompt: str = SYSTEM):
        if max_calls < 1:
            raise ValueError(f"calculator max_calls must be >= 1, got {max_calls}")
        self.max_calls, self.system_prompt = max_calls, system_prompt
        self.answer, self.calls = "", 0

    def reset(self, item: dict, *, seed: int) -> StepResult:
        if "answer" not in item:
            raise ValueError(f"the calculator environment needs items with an 'answer' (item {item.get('id')} has none)")
        self.answer, self.calls = str(item["answer"]), 0
        prompt = item["prompt"]
        user = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return StepResult([{"role": "system", "content": self.system_prompt}, *user], anchor=0)

    def step(self, action: Action) -> StepResult:
        if not action.tool_calls:
            ok = math_equal(extract_answer(action.text, order=["last_number"]), self.answer)
            return StepResult([], 1.0 if ok else 0.0, terminated=True, anchor=self.calls, info={"success": ok})
        self.calls += 1
        out, info = answer_tool_calls(action.tool_calls, "calculator", _calculate, 'the calculator needs {"expression": "<arithmetic>"}')
        return StepResult(out, 0.0, truncated=self.calls >= self.max_calls, anchor=self.calls, info=info)

    def fork(self) -> CalculatorEnv:
        """A copy of the live episode (its answer and calls so far; every field is immutable)."""
        return copy.copy(self)

    def close(self) -> None:
        pass


def _calculate(arguments: dict) -> str | None:
    expression = arguments.get("expression")
    return calculate(expression) if isinstance(expression, str) else None
