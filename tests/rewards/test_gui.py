"""aer_gui: InfiGUI-G1's Adaptive Exploration Reward against hand-computed values (the recipe's rules)."""

import json
import math

import pytest

from covey.rewards import get_reward
from covey.rewards.gui import AerGuiReward, aer_gui_score, first_point_in_box

BOX = (10, 10, 20, 20)
IN, OUT1, OUT2, OUT3 = [15, 12], [0, 0], [30, 5], [3, 40]  # no three of these on one line


def pts(*points) -> str:
    return json.dumps([{"point_2d": p} for p in points])


def think(answer: str) -> str:
    return f"<think>the element is near the top</think>\n{answer}"


@pytest.mark.parametrize("points,expected", [
    ((OUT1, IN, OUT2), 1 + 1 / math.sqrt(6)),  # N=3, k=2 -> 1.4082
    ((IN,), 2.0),  # N=1, k=1
    ((IN, OUT1, OUT2, OUT3), 1.5),  # N=4, k=1
    ((OUT1, OUT2), 0.5),  # N=2, none inside
    ((OUT1, OUT2, OUT3, [50, 7]), 0.75),  # N=4, none inside
    ((), 0.0),  # N=0: a well-formed empty list, accuracy -1
])  # fmt: skip
def test_spec_vectors(points, expected):
    assert aer_gui_score(think(pts(*points)), *BOX) == pytest.approx(expected, abs=1e-12)
    assert aer_gui_score(pts(*points), *BOX, no_think=True) == pytest.approx(expected, abs=1e-12)


def test_n3_k2_rounds_to_the_spec_value():
    assert round(aer_gui_score(think(pts(OUT1, IN, OUT2)), *BOX), 4) == 1.4082


@pytest.mark.parametrize("text", [
    think(pts([0, 0], [1, 1], [2, 2])),  # collinear triple
    think(pts(IN, [0, 0], [5, 0], [9, 0])),  # collinear triple among four (not involving the hit)
    think(pts(IN, IN, OUT1)),  # a repeated point is collinear with any third point
    think('[{"point_2d": [15]}]'),  # point of one coordinate
    think('[{"point": [15, 15]}]'),  # wrong key
    think('[[15, 15]]'),  # not an object
    think('{"point_2d": [15, 15]}'),  # not a list
    think('[{"point_2d": [15, 15]'),  # broken JSON
    think('no points at all'),
    think('[{"point_2d": ["a", "b"]}]'),  # non-numeric coordinates read by the box test
    think('[{"point_2d": [1, 2]}, {"point_2d": [3, "x"]}, {"point_2d": [5, 9]}]'),  # read by the collinearity test
    pts(IN),  # no think block
    " " + think(pts(IN)),  # must START with <think>
    "<think>   </think>" + pts(IN),  # empty thought
    "<think>a</think><think>b</think>" + pts(IN),  # two think blocks
    "<think>a</think>   ",  # nothing after the thought
    "",
])  # fmt: skip
def test_format_errors_score_minus_one_whatever_the_ratios(text):
    assert aer_gui_score(text, *BOX) == -1.0
    assert aer_gui_score(text, *BOX, fmt_ratio=0.5, acc_ratio=3.0) == -1.0


@pytest.mark.parametrize("point,inside", [
    ([10, 10], True), ([20, 20], True), ([10, 20], True), ([20, 10], True), ([15.5, 19.99], True),
    ([9.999, 15], False), ([20.001, 15], False), ([15, 9], False), ([15, 21], False),
])  # fmt: skip
def test_box_edges_are_inclusive(point, inside):
    assert aer_gui_score(think(pts(point)), *BOX) == (2.0 if inside else 0.0)


def test_ratios_weigh_format_and_accuracy():
    assert aer_gui_score(think(pts(OUT1, IN, OUT2)), *BOX, fmt_ratio=0.5, acc_ratio=2.0) == pytest.approx(0.5 + 2 / math.sqrt(6))
    assert aer_gui_score(think(pts(OUT1, OUT2)), *BOX, fmt_ratio=0.5, acc_ratio=2.0) == pytest.approx(0.5 - 1.0)


def test_json_is_taken_from_the_first_bracket_to_the_last():
    text = think(f"The candidates are {pts(IN, OUT1)} in that order.")
    assert aer_gui_score(text, *BOX) == pytest.approx(1 + 1 / math.sqrt(2))
    assert aer_gui_score(think(f"see [note] {pts(IN)}"), *BOX) == -1.0  # "[note] [...]" is not JSON


def test_duplicates_count_in_n():
    assert aer_gui_score(think(pts(OUT1, OUT1)), *BOX) == 0.5  # N = 2, none inside
    assert aer_gui_score(think(pts(IN, IN)), *BOX) == pytest.approx(1 + 1 / math.sqrt(2))


def test_coordinates_after_the_first_hit_are_not_read():
    """As in the recipe: with fewer than 3 points only the box test reads them, and it stops at the first hit."""
    text = think('[{"point_2d": [15, 15]}, {"point_2d": ["a", "b"]}]')
    assert aer_gui_score(text, *BOX) == pytest.approx(1 + 1 / math.sqrt(2))


def test_the_registered_reward_reads_the_box_columns_and_chat_messages():
    reward = get_reward("aer_gui")
    completions = [think(pts(OUT1, IN, OUT2)), [{"role": "assistant", "content": think(pts([1, 1]))}], "junk"]
    out = reward(prompts=["q"] * 3, completions=completions, x1=[10, 0, 10], y1=[10, 0, 10], x2=[20, 2, 20], y2=[20, 2, 20])
    assert out == pytest.approx([1 + 1 / math.sqrt(6), 2.0, -1.0])
    loose = get_reward("aer_gui", no_think=True, acc_ratio=0.5)
    assert loose(prompts=["q"], completions=[pts(IN)], x1=[10], y1=[10], x2=[20], y2=[20]) == [1.5]


@pytest.mark.parametrize("params", [{"fmt_ratio": "1"}, {"acc_ratio": float("nan")}, {"no_think": "yes"}, {"fmt_ratio": True}])
def test_bad_params_fail_when_built(params):
    with pytest.raises(ValueError, match="aer_gui"):
        AerGuiReward(**params)


def test_bad_box_columns_fail_loudly():
    reward = AerGuiReward()
    with pytest.raises(ValueError, match="x1 has 1 entries"):
        reward(prompts=None, completions=["a", "b"], x1=[1], y1=[1, 1], x2=[2, 2], y2=[2, 2])
    with pytest.raises(ValueError, match="y2 must hold numbers"):
        reward(prompts=None, completions=["a"], x1=[1], y1=[1], x2=[2], y2=[None])
    with pytest.raises(ValueError, match="x1 > x2"):
        reward(prompts=None, completions=["a"], x1=[3], y1=[1], x2=[2], y2=[2])


def test_first_point_in_box_is_the_first_candidate_only():
    assert first_point_in_box(think(pts(IN, OUT1)), *BOX) == 1.0
    assert first_point_in_box(think(pts(OUT1, IN)), *BOX) == 0.0
    assert first_point_in_box(think(pts(IN, IN, OUT1)), *BOX) == 0.0  # collinear: a format error
    assert first_point_in_box(pts(IN), *BOX) == 0.0  # no think block
    assert first_point_in_box(pts(IN), *BOX, no_think=True) == 1.0
    assert first_point_in_box(think("[]"), *BOX) == 0.0


@pytest.mark.parametrize("answer", [
    "[" * 100_000 + "]" * 100_000,  # nesting past the recursion limit: RecursionError in json
    "[" + ", ".join(f'{{"point_2d": [{i}, {i * i}]}}' for i in range(2000)) + "]",  # 1.3e9 triples to test
])
def test_answers_written_to_hang_or_crash_the_reward_are_format_errors(answer):
    import time

    t = time.perf_counter()
    assert aer_gui_score(answer, 10, 10, 20, 20, no_think=True) == -1.0
    assert first_point_in_box(answer, 10, 10, 20, 20, no_think=True) == 0.0
    assert time.perf_counter() - t < 2.0
