"""Tool calls: the Qwen/Hermes ``<tool_call>{json}</tool_call>`` parser and the built-in calculator.

A malformed call never raises: it comes back as a `ToolCall` with `arguments=None` and an `error`,
which the environment returns to the model as a tool message (and the episode loop counts). That
includes JSON that Python's parser refuses by raising something else than a decode error: nesting past
the recursion limit (RecursionError: 1,000 levels are about 510 SmolLM2 tokens), an integer of more than
4,300 digits (ValueError), and calls nested deeper than `MAX_DEPTH` (32) levels, which a tool's arguments
never need and which a later `json.dumps` (verifiers' tool messages) could not write back.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re

from collections.abc import Callable

from covey.envs.base import ToolCall

__all__ = ["CALCULATOR_SCHEMA", "MAX_DEPTH", "answer_tool_calls", "calculate", "parse_tool_calls", "tool_message"]

_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
MAX_DEPTH = 32


def _loads(text: str) -> tuple[object, str | None]:
    """(value, None) or (None, why): json.loads that never raises, with the nesting bounded."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"tool call is not valid JSON ({e.msg} at char {e.pos})"
    except RecursionError:
        return None, "tool call JSON is nested too deep"
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        return None, f"tool call JSON cannot be read ({str(e)[:80]})"
    stack = [(value, 1)]
    while stack:
        v, level = stack.pop()
        if level > MAX_DEPTH:
            return None, f"tool call JSON is nested deeper than {MAX_DEPTH} levels"
        if isinstance(v, dict):
            stack.extend((x, level + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, level + 1) for x in v)
    return value, None


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` block of a turn, in order (Qwen2.5/Hermes format:
    ``{"name": str, "arguments": {...}}``). An unclosed block at the end of the turn (the turn ran out
    of tokens) and bad JSON are errors, as is a missing name or non-object arguments."""
    calls = []
    for m in _CALL.finditer(text):
        body, closed = m.group(1).strip(), bool(m.group(2))
        if not closed:
            calls.append(ToolCall("", None, "unclosed <tool_call> (no </tool_call>)"))
            continue
        obj, why = _loads(body)
        if why is not None:
            calls.append(ToolCall("", None, why))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            calls.append(ToolCall("", None, 'a tool call must be a JSON object with a "name" string'))
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # some models emit the arguments as a JSON string
            inner, why = _loads(args)
            if why is None:
                args = inner
            elif not why.startswith("tool call is not valid JSON"):
                calls.append(ToolCall(obj["name"], None, why))
                continue
        if not isinstance(args, dict):
            calls.append(ToolCall(obj["name"], None, '"arguments" must be a JSON object'))
            continue
        calls.append(ToolCall(obj["name"], args))
    return calls


def tool_message(content: str) -> dict:
    """A chat message with role "tool" (the result of a call, or its error)."""
    return {"role": "tool", "content": content}


def answer_tool_calls(calls: list[ToolCall], tool: str, run: Callable[[dict], str | None], usage: str) -> tuple[list[dict], dict]:
    """One tool message per call of a turn, for an environment whose only tool is `tool`, and the
    step's info. A call that did not parse gets its parse error, a call to another tool an "unknown
    tool" error, and a call whose arguments `run` rejects (returns None) ``"error: " + usage``;
    otherwise the message is ``run(arguments)``. Every message starting with "error:" is counted in
    ``info["tool_errors"]``; the turn is valid when at least one call parsed."""
    out, errors = [], 0
    for call in calls:
        if call.error is not None:
            result = f"error: {call.error}"
        elif call.name != tool:
            result = f"error: unknown tool {call.name!r}; the only tool is {tool!r}"
        else:
            result = run(call.arguments)
            if result is None:
                result = f"error: {usage}"
        errors += result.startswith("error:")
        out.append(tool_message(result))
    valid = any(c.error is None for c in calls)
    return out, {"valid": valid, "tool_calls": len(calls), "tool_errors": errors, "success": False}


# ------------------------------------------------------------------------------------ calculator
CALCULATOR_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. (12 + 3) * 4"}},
            "required": ["expression"],
        },
    },
}

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}  # fmt: skip
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_CHARS, MAX_EXPONENT, MAX_ABS = 200, 64, 1e30


def calculate(expression: str) -> str:
    """The value of an arithmetic expression as text, or ``"error: ..."``.

    Only numbers, + - * / // % **, unary signs and parentheses are accepted (the expression is parsed
    with `ast` and walked; nothing is ever passed to eval). Limits keep it cheap: at most 200
    characters, exponents at most 64 in size, |values| at most 1e30. Integral results print without
    a decimal point ("6", not "6.0").
    """
    if not isinstance(expression, str) or not expression.strip():
        return "error: empty expression"
    if len(expression) > MAX_CHARS:
        return f"error: expression longer than {MAX_CHARS} characters"
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        value = _eval(tree.body)
    except SyntaxError:
        return "error: not an arithmetic expression"
    except ZeroDivisionError:
        return "error: division by zero"
    except (ValueError, OverflowError, TypeError) as e:
        return f"error: {e}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "error: result is not finite"
        if value.is_integer():
            value = int(value)
        else:
            return repr(round(value, 10))
    return str(value)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent larger than {MAX_EXPONENT}")
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported element {type(node).__name__}")


def _bounded(x):
    if isinstance(x, complex) or abs(x) > MAX_ABS:
        raise ValueError("value out of range")
    return x
