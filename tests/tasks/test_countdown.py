import pytest

from covey.tasks import Countdown, get_task
from covey.tasks._expr import evaluate
from covey.tasks.countdown import extract_expression


def _score(text, nums=(25, 5, 4, 8), target=80, **params):
    return Countdown(n_train=0, n_test=0, **params).score(text, list(nums), target)


def test_every_generated_problem_is_solvable_by_its_solution():
    task = Countdown(n_train=200, n_test=50, seed=3)
    for item in task.examples("train") + task.examples("test"):
        value, used = evaluate(item["solution"])
        assert value == item["target"] and sorted(used) == sorted(item["nums"])
        assert 3 <= len(item["nums"]) <= 4 and all(1 <= n <= 99 for n in item["nums"])
        assert 10 <= item["target"] <= 100 and item["answer"] == str(item["target"])


def test_generation_is_reproducible_and_splits_are_disjoint():
    a, b = Countdown(n_train=100, n_test=30), Countdown(n_train=100, n_test=30)
    assert a.examples("train") == b.examples("train")
    key = lambda x: (tuple(sorted(x["nums"])), x["target"])  # noqa: E731
    assert not {key(x) for x in a.examples("train")} & {key(x) for x in a.examples("test")}


def test_correct_expression_in_answer_tags_scores_one():
    # (25 - 5) * 4 = 80, uses 25, 5, 4 (8 unused: allowed by default)
    assert _score("<think>20*4</think><answer> (25 - 5) * 4 </answer>") == 1.0


def test_use_all_demands_every_number():
    assert _score("<answer>(25 - 5) * 4</answer>", use_all=True) == 0.0
    # (25 - 5) * 4 * 8 / 8 = 80 but 8 is given once
    assert _score("<answer>(25 - 5) * 4 * 8 / 8</answer>", use_all=True) == 0.0
    # 25 * 4 - 5 * 8 = 100 - 40 = 60 uses each of 25, 5, 4, 8 exactly once
    assert _score("<answer>25 * 4 - 5 * 8</answer>", target=60, use_all=True) == 1.0


def test_reusing_a_number_or_using_another_fails():
    assert _score("<answer>(25 - 5) * 4 + 4 - 4</answer>") == 0.0  # 4 used three times
    assert _score("<answer>80</answer>") == 0.0  # 80 is not given
    assert _score("<answer>(25 - 5) * 2 * 2</answer>") == 0.0


def test_wrong_value_unparseable_and_missing_answers():
    assert _score("<answer>25 + 5 + 4 + 8</answer>") == 0.0
    assert _score("<answer>import os</answer>") == 0.0
    assert _score("I cannot do it") == 0.0
    assert _score("<answer>25 / (5 - 5)</answer>") == 0.0


def test_format_score_goes_to_found_but_wrong_expressions_only():
    assert _score("<answer>25 + 5 + 4 + 8</answer>", format_score=0.1) == 0.1
    assert _score("<answer>os.system('x')</answer>", format_score=0.1) == 0.1
    assert _score("nothing here", format_score=0.1) == 0.0
    assert _score("<answer>(25 - 5) * 4</answer>", format_score=0.1) == 1.0


def test_fractional_intermediate_values_are_exact():
    # 8 / (1 - 2/3) = 24 only with exact fractions (floats give 23.999999999999996)
    assert _score("<answer>8 / (1 - 2 / 3)</answer>", nums=(8, 1, 2, 3), target=24) == 1.0


def test_without_tags_the_last_expression_is_read_unless_tags_required():
    text = "Try 25 + 5 = 30, no. Then (25 - 5) * 4 = 80."
    assert extract_expression(text) == "(25 - 5) * 4"
    assert _score(text) == 1.0
    assert _score(text, require_tags=True) == 0.0


def test_last_answer_tag_wins_and_equals_sign_ends_it():
    assert extract_expression("<answer>1 + 2</answer> <answer> (25 - 5) * 4 = 80 </answer>") == "(25 - 5) * 4"


def test_reward_columns_and_chat_completions():
    task = get_task("countdown", n_train=0, n_test=1)
    item = task.examples("test")[0]
    good = [{"role": "assistant", "content": f"<answer>{item['solution']}</answer>"}]
    assert task.reward([item["prompt"]] * 2, [good, "<answer>1</answer>"], nums=[item["nums"]] * 2,
                       target=[item["target"]] * 2) == [1.0, 0.0]
    assert item["prompt"][0]["role"] == "user" and "<answer>" in item["prompt"][0]["content"]


def test_bad_params_are_named():
    with pytest.raises(ValueError, match="min_numbers <= max_numbers"):
        Countdown(min_numbers=5, max_numbers=4)
    with pytest.raises(ValueError, match="format_score must be in"):
        Countdown(format_score=1.5)


def test_docstring_examples_hold():
    import doctest

    import covey.tasks.countdown as mod

    result = doctest.testmod(mod)
    assert result.attempted >= 5 and result.failed == 0
