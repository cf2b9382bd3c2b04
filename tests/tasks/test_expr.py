from fractions import Fraction

import pytest

from covey.tasks._expr import MAX_EXPRESSION_CHARS, ExpressionError, evaluate


def test_exact_fraction_arithmetic_and_numbers_in_order():
    assert evaluate("(1 + 2) / 3") == (Fraction(1), [1, 2, 3])
    assert evaluate("7 / 2") == (Fraction(7, 2), [7, 2])
    assert evaluate("-3 + 10") == (Fraction(7), [3, 10])
    assert evaluate("6 × 7 ÷ 2") == (Fraction(21), [6, 7, 2])


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "2 ** 10", "0x10 + 1", "1_000", "1e3", "3.5 + 1", "x + 1",
     "[1, 2]", "1 % 2", "1 // 2", "", "((1)", "1 +"],
)
def test_anything_but_integer_arithmetic_is_refused(text):
    with pytest.raises(ExpressionError):
        evaluate(text)


def test_division_by_zero_and_length_limit():
    with pytest.raises(ExpressionError, match="division by zero"):
        evaluate("5 / (3 - 3)")
    with pytest.raises(ExpressionError, match="longer than"):
        evaluate("1+" * MAX_EXPRESSION_CHARS + "1")
    with pytest.raises(ExpressionError):
        evaluate("(" * 150 + "1" + ")" * 49)  # unbalanced and deep: a clean refusal, no crash
