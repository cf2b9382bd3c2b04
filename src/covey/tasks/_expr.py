"""Safe evaluation of arithmetic expressions written by a model (used by arithmetic and countdown).

The text is parsed with `ast` and only integer literals, binary + - * /, unary + - and parentheses
are evaluated, exactly, with `fractions.Fraction`. Nothing is ever passed to eval/exec.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

__all__ = ["ExpressionError", "evaluate", "MAX_EXPRESSION_CHARS"]

_ALLOWED_CHARS = re.compile(r"[\d\s+\-*/()]+")  # so "0x10", "1_0", "1e3" never reach the parser
MAX_EXPRESSION_CHARS = 200  # longer text is not a countdown answer, and deep nesting could exhaust the parser

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


class ExpressionError(ValueError):
    """The text is not an expression of integers with + - * / and parentheses (or divides by 0)."""


def evaluate(text: str) -> tuple[Fraction, list[int]]:
    """``(value, numbers used in order)`` of an integer expression; ExpressionError otherwise.

    ``×``/``÷`` are read as ``*``/``/``. Division is exact (Fraction), so ``(1 + 2) / 3`` is 1.

    >>> evaluate("(25 - 5) * 4 / 8")
    (Fraction(10, 1), [25, 5, 4, 8])
    >>> evaluate("__import__('os')")
    Traceback (most recent call last):
    ...
    covey.tasks._expr.ExpressionError: only digits, spaces, + - * / and parentheses are allowed
    """
    text = text.replace("×", "*").replace("÷", "/").strip()
    if not text:
        raise ExpressionError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    if not _ALLOWED_CHARS.fullmatch(text):
        raise ExpressionError("only digits, spaces, + - * / and parentheses are allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ExpressionError(f"not an expression: {type(e).__name__}") from None
    numbers: list[int] = []
    return _eval(tree.body, numbers), numbers


def _eval(node: ast.AST, numbers: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, numbers), _eval(node.right, numbers)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ExpressionError("division by zero")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, numbers)
        return -value if isinstance(node.op, ast.USub) else value
    raise ExpressionError(f"not allowed in an answer expression: {type(node).__name__}")
