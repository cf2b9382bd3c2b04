"""Tool-call parsing (Qwen/Hermes <tool_call> JSON) and the safe calculator."""

import pytest

from covey.envs.tools import calculate, parse_tool_calls


def test_parses_well_formed_calls_in_order():
    text = ('think <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call> and '
            '<tool_call>\n{"name": "search", "arguments": "{\\"q\\": \\"x\\"}"}\n</tool_call>')  # fmt: skip
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("calculator", {"expression": "1+2"}, None),
        ("search", {"q": "x"}, None),  # arguments given as a JSON string are decoded
    ]
    assert parse_tool_calls("no calls here") == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<tool_call>{bad json</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name" string'),
        ('<tool_call>["calculator"]</tool_call>', '"name" string'),
        ('<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>', '"arguments" must be a JSON object'),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "1+', "unclosed"),
    ],
)
def test_malformed_calls_come_back_as_errors_never_raise(text, error):
    (call,) = parse_tool_calls(text)
    assert call.arguments is None and error in call.error


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("2*(3+4)", "14"), ("7 // 2", "3"), ("7 % 4", "3"), ("-3 + +5", "2"), ("2**10", "1024"),
        ("6/3", "2"), ("1/4", "0.25"), ("1/3", "0.3333333333"), ("1.5*2", "3"),
    ],
)  # fmt: skip
def test_calculator_values(expr, want):
    assert calculate(expr) == want


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        ("__import__('os').system('echo hi')", "unsupported"), ("abs(-1)", "unsupported"), ("x + 1", "unsupported"),
        ("'a' * 3", "unsupported"), ("1/0", "division by zero"), ("2**100000", "exponent"), ("9**9**9", "exponent"),
        ("10**40", "out of range"), ("1 +", "not an arithmetic"), ("", "empty"), ("1+" * 200 + "1", "longer than"),
        ("[1, 2]", "unsupported"), ("True + 1", "unsupported"),
    ],
)  # fmt: skip
def test_calculator_refuses_anything_but_bounded_arithmetic(expr, error):
    out = calculate(expr)
    assert out.startswith("error:") and error in out
