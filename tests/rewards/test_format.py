"""FormatReward: regex and ordered-tag formats."""

import pytest

from covey.rewards import FormatReward


def score(reward, *completions):
    return reward(prompts=None, completions=list(completions))


def test_think_then_answer_is_the_default_format():
    r = FormatReward()
    assert score(r, "<think>a</think><answer>b</answer>", "  <think>\na\n</think>\n\n<answer>b</answer>\n") == [1.0, 1.0]


def test_missing_wrong_order_or_repeated_tags_score_zero():
    r = FormatReward()
    assert score(
        r,
        "<answer>b</answer>",
        "<answer>b</answer><think>a</think>",
        "<think>a</think><think>a</think><answer>b</answer>",
        "<think>a<think>x</think></think><answer>b</answer>",
        "<think>a</think> text <answer>b</answer>",
    ) == [0.0] * 5


def test_loose_mode_allows_text_around_tags_but_not_repeats():
    r = FormatReward(tags=["answer"], strict=False)
    assert score(r, "so <answer>4</answer>.", "<answer>4</answer><answer>5</answer>") == [1.0, 0.0]


def test_empty_completion_scores_zero():
    assert score(FormatReward(), "") == [0.0]
    assert score(FormatReward(pattern=r".*"), "", "x") == [0.0, 1.0]


def test_regex_must_match_the_whole_completion():
    r = FormatReward(pattern=r"Answer: \d+")
    assert score(r, "Answer: 12", "Answer: 12 and more", [{"role": "assistant", "content": "Answer: 3"}]) == [1.0, 0.0, 1.0]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="not both"):
        FormatReward(pattern="x", tags=["a"])
    with pytest.raises(ValueError, match="invalid regex"):
        FormatReward(pattern="(")
    with pytest.raises(ValueError, match="tags"):
        FormatReward(tags=["<bad>"])
