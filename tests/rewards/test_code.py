"""Code reward: code extraction and test fractions through the sandbox."""

import pytest

from covey.rewards import CodeReward, extract_code

SQ = "```python\ndef sq(x):\n    return x * x\n```"


def test_last_python_block_is_the_program():
    text = "```python\nx = 1\n```\nand a js one\n```js\nlet y\n```\n```\nx = 3\n```"
    assert extract_code(text) == "x = 3\n"
    assert extract_code("no code") is None and extract_code("```python\nunclosed") is None


def test_fraction_and_binary_modes():
    tests = [["assert sq(2) == 4", "assert sq(3) == 10"]]
    assert CodeReward()(None, [SQ], tests=tests) == [0.5]
    assert CodeReward(mode="binary")(None, [SQ], tests=tests) == [0.0]
    assert CodeReward(mode="binary")(None, [SQ], tests=[["assert sq(2) == 4"]]) == [1.0]


def test_no_code_block_scores_zero_and_no_tests_none():
    assert CodeReward()(None, ["def sq(x): return x*x", SQ], tests=[["assert sq(1) == 1"], None]) == [0.0, None]


def test_stdin_stdout_tests_and_chat_completions():
    prog = [{"role": "assistant", "content": "```python\nprint(int(input()) * 2)\n```"}]
    assert CodeReward()(None, [prog], tests=[{"io": [["2\n", "4\n"], ["5", "11"]]}]) == [0.5]


def test_hanging_code_costs_only_its_test_timeout():
    hang = "```python\ndef f():\n    while True:\n        pass\n```"
    assert CodeReward(timeout_s=1)(None, [hang], tests=[["f()", "assert f is not None"]]) == [0.5]


def test_missing_tests_column_is_named():
    with pytest.raises(ValueError, match="'tests' column"):
        CodeReward()(None, [SQ])
    with pytest.raises(ValueError, match="mode"):
        CodeReward(mode="partial")
