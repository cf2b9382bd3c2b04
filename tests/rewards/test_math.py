import threading

import pytest

from covey.rewards.math import (
    boxed_format_reward,
    completion_text,
    extract_answer,
    extract_boxed,
    math_accuracy_reward,
    math_equal,
    normalize_answer,
    parse_number,
)

# --- extraction ---------------------------------------------------------------------------------


def test_boxed_keeps_nested_braces():
    assert extract_boxed(r"thus \boxed{\frac{\sqrt{2}}{2}}.") == r"\frac{\sqrt{2}}{2}"


def test_boxed_last_by_default_and_first_on_request():
    text = r"first \boxed{1} then \boxed{2}"
    assert extract_boxed(text) == "2"
    assert extract_boxed(text, which="first") == "1"


def test_box_inside_a_box_belongs_to_the_outer_one():
    assert extract_boxed(r"\boxed{\frac{1}{\boxed{2}}}") == r"\frac{1}{\boxed{2}}"


def test_boxed_with_space_form_and_fbox():
    assert extract_boxed(r"so \boxed 5 done") == "5"
    assert extract_boxed(r"\fbox{7}") == "7"


def test_unclosed_box_from_truncated_completion_is_no_answer():
    assert extract_boxed(r"\boxed{\frac{1}{2}") is None


def test_escaped_braces_inside_box_do_not_close_it():
    assert extract_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"


def test_bad_which_is_rejected_with_allowed_values():
    with pytest.raises(ValueError, match="'last' or 'first'"):
        extract_boxed("x", which="middle")


def test_gsm8k_marker_wins_over_last_number():
    assert extract_answer("She has 3 + 4 = 7 apples.\n#### 7\nBonus: 99") == "7"


def test_answer_is_takes_leading_number_of_clause():
    assert extract_answer("The answer is 5 because 2+3=5") == "5"
    assert extract_answer("Answer: 1,234 apples") == "1,234"
    assert extract_answer("The final answer is $12. Next, 99") == "$12"


def test_answer_is_keeps_tuples():
    assert extract_answer("The answer is 3, 4") == "3, 4"


def test_last_number_treats_binary_minus_as_operator():
    # "5-3=2": the last number is 2, and "-3" in "5-3" is not a negative number
    assert extract_answer("5-3=2") == "2"
    assert extract_answer("so we get 10-13", order=["last_number"]) == "13"
    assert extract_answer("the result is negative: -8") == "-8"


def test_last_number_reads_fractions_and_thousands():
    assert extract_answer("x = 3/4.") == "3/4"
    assert extract_answer("total 1,234,567 items") == "1,234,567"


def test_order_is_configurable():
    text = r"#### 3 but \boxed{4}"
    assert extract_answer(text) == "4"
    assert extract_answer(text, order=["gsm8k", "boxed"]) == "3"


def test_no_answer_and_garbage_give_none():
    assert extract_answer("") is None
    assert extract_answer("I do not know, sorry!") is None
    assert extract_answer("}{}{\\boxed{") is None


def test_unknown_mode_is_rejected_with_allowed_modes():
    with pytest.raises(ValueError, match="last_number"):
        extract_answer("5", order=["regex"])


def test_completion_text_accepts_str_and_chat_messages():
    assert completion_text("hi") == "hi"
    assert completion_text([{"role": "assistant", "content": "42"}]) == "42"
    assert completion_text([]) == ""
    with pytest.raises(TypeError, match="chat messages"):
        completion_text(42)


# --- normalisation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("1,234", "1234"),
        (r"\$1,234.", "1234"),
        ("5 dollars", "5"),
        (r"12 \text{ cm}", "12"),
        (r"\dfrac{3}{4}", r"\frac{3}{4}"),
        (r"\left( 1, 2 \right)", "( 1, 2 )"),
        ("90^\\circ", "90"),
        ("50\\%", "50"),
        ("\u22125", "-5"),
        ("5 x", "5 x"),  # a lone letter may be a variable: kept
        ("1,2", "1,2"),  # not a thousands separator
    ],
)
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_parse_number_plain_forms():
    from fractions import Fraction

    assert parse_number("42") == (Fraction(42), True)
    assert parse_number("-0.25") == (Fraction(-1, 4), False)
    assert parse_number(r"\frac{3}{4}") == (Fraction(3, 4), True)
    assert parse_number(r"-\dfrac12") == (Fraction(-1, 2), True)
    assert parse_number("1/0") is None
    assert parse_number(r"\sqrt{2}") is None
    assert parse_number("1e999999999") is None  # must not try to build 10**999999999


# --- equivalence --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("0.5", "1/2"),
        ("1/2", r"\frac{1}{2}"),
        (r"\dfrac12", "0.5"),
        ("1024", "2^{10}"),
        (r"\sqrt{2}/2", r"\frac{1}{\sqrt{2}}"),
        ("1,234", "1234"),
        ("$5", "5 dollars"),
        ("-7", "-7.0"),
        ("0.333333", r"\frac13"),  # |1/3 - 0.333333| = 3.3e-7 <= 1e-6
        (r"1+x^2", "x^2+1"),
        (r"\left(3, \frac{\pi}{2}\right)", r"(3,\frac{\pi}{2})"),
        ("1" + "0" * 100, "10^{100}"),
    ],
)
def test_equivalent_forms_match(pred, gold):
    assert math_equal(pred, gold)


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("0.5", "1/3"),
        ("12345678901234567891", "12345678901234567890"),  # integers: exact, no relative tol
        ("-5", "5"),
        ("3.14", r"\pi"),
        ("x+1", "x+2"),
        ("banana", "5"),
        (None, "5"),
        ("", "5"),
        ("5", ""),
    ],
)
def test_different_answers_do_not_match(pred, gold):
    assert not math_equal(pred, gold)


def test_tolerance_applies_to_decimals_only():
    assert math_equal("0.3334", r"\frac13", tol=1e-3)
    assert not math_equal("0.3334", r"\frac13")
    assert not math_equal("1001", "1000", tol=0.01)  # two integers compare exactly


def test_percent_option_matches_scaled_values():
    assert not math_equal("0.5", "50%")
    assert math_equal("0.5", "50%", percent=True)
    assert math_equal("50", "0.5", percent=True)


def test_symbolic_check_works_off_the_main_thread():
    # math-verify's signal.alarm timeout would raise in a worker thread; we disable it there
    out = []
    worker = threading.Thread(target=lambda: out.append(math_equal(r"\sqrt{2}/2", r"1/\sqrt{2}")))
    worker.start()
    worker.join()
    assert out == [True]


# --- reward functions ---------------------------------------------------------------------------


def test_accuracy_reward_accepts_strings_and_chat_messages():
    completions = [r"so \boxed{\dfrac12}", [{"role": "assistant", "content": "#### 1,000"}], "no idea"]
    assert math_accuracy_reward(["p"] * 3, completions, answer=["0.5", "1000", "3"]) == [1.0, 1.0, 0.0]


def test_accuracy_reward_multiple_boxes_uses_last():
    assert math_accuracy_reward(["p"], [r"\boxed{1} no wait \boxed{2}"], answer=["2"]) == [1.0]


def test_accuracy_reward_missing_gold_is_unscorable():
    assert math_accuracy_reward(["p", "p"], ["5", "5"], answer=[None, ""]) == [None, None]


def test_accuracy_reward_ignores_other_columns_and_checks_lengths():
    assert math_accuracy_reward(["p"], ["7"], answer=["7"], level=[3], id=[0]) == [1.0]
    with pytest.raises(ValueError, match="answer has 1 entries but there are 2"):
        math_accuracy_reward(["p", "p"], ["7", "8"], answer=["7"])


def test_accuracy_reward_with_bound_order():
    from functools import partial

    only_boxed = partial(math_accuracy_reward, order=["boxed"])
    assert only_boxed(["p"], ["The answer is 7"], answer=["7"]) == [0.0]


def test_boxed_format_reward_needs_exactly_one_parseable_box():
    completions = [r"\boxed{2}", r"\boxed{2} \boxed{3}", "2", r"\boxed{}", r"\boxed{\frac{x}{2}}", r"\boxed{@@}"]
    assert boxed_format_reward(None, completions) == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def test_format_reward_other_formats():
    assert boxed_format_reward(None, ["work\n#### 42", "#### 1\n#### 2"], fmt="gsm8k") == [1.0, 0.0]
    assert boxed_format_reward(None, ["The answer is 9."], fmt="answer_is") == [1.0]
    with pytest.raises(ValueError, match="fmt must be one of"):
        boxed_format_reward(None, ["x"], fmt="xml")


def test_docstring_examples_hold():
    import doctest

    import covey.rewards.math as mod

    result = doctest.testmod(mod)
    assert result.attempted > 10 and result.failed == 0
