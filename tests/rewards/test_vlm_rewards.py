"""The vision recipes' rewards with hand-computed values, and answers written to get full marks without
doing the task: UI-R1's action and coordinate rewards, Patho-R1-style multiple choice, TempSamp-R1's IoU."""

import math

import pytest

from covey.rewards.format import FormatReward
from covey.rewards.temporal import TemporalIoU, gt_response, parse_span, shaped_iou, temporal_iou
from covey.rewards.ui_r1 import extract_action, extract_bbox, extract_coord, ui_r1_action, ui_r1_coord
from covey.rewards.vqa import chosen_option, mcq_accuracy_provisional

CLICK = "<answer>[{'action': 'click' ,'coordinate': [10, 20, 30, 40] }]</answer>"  # UI-R1's solution builder
SCROLL = "<answer>[{'action': 'scroll' ,'coordinate': [0,0,0,0]}]</answer>"


def _ans(action, coord=None):
    return f"<think>t</think> <answer>[{{'action': '{action}'" + (f", 'coordinate': {coord}" if coord else "") + "}]</answer>"


def test_ui_r1_parsers():
    assert extract_action(_ans("click", [1, 2])) == "click" and extract_action("<answer>[{'action': open_app}]</answer>") == "open_app"
    assert extract_coord(_ans("click", [12, 7])) == ([12, 7], True) and extract_coord(_ans("click")) == ([0, 0], False)
    assert extract_bbox(CLICK) == ([10, 20, 30, 40], True) and extract_bbox(SCROLL) == ([0, 0, 0, 0], True)


def test_ui_r1_coordinate_reward_edges_and_scales():
    # box x 10..30, y 20..40, edges included
    got = ui_r1_coord(None, [_ans("click", [10, 40]), _ans("click", [30, 41]), _ans("click", [9, 30]), _ans("scroll", [20, 30])],
                      [CLICK] * 4)  # fmt: skip
    assert got == [1.0, 0.0, 0.0, 0.0]  # on the edge; below; left of it; the wrong action scores 0 however placed
    # the point is scaled first and truncated: (7 * 1.5, 13 * 2.0) = (10, 26) is inside; (6 * 1.5) = 9 is not
    assert ui_r1_coord(None, [_ans("click", [7, 13]), _ans("click", [6, 13])], [CLICK] * 2, scales=[[1.5, 2.0]] * 2) == [1.0, 0.0]
    # a matching non-click action earns it without a point (UI-R1's code)
    assert ui_r1_coord(None, [_ans("scroll"), _ans("click", [15, 25])], [SCROLL, SCROLL]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="scales has 1 entries"):
        ui_r1_coord(None, [_ans("click", [1, 1])] * 2, [CLICK] * 2, scales=[[1, 1]])


def test_ui_r1_cannot_be_fooled_by_spraying_points_or_actions():
    spray = "<answer>[{'action': 'click', 'coordinate': [0, 0]}, {'action': 'click', 'coordinate': [20, 30]}]</answer>"
    assert ui_r1_coord(None, [spray], [CLICK]) == [0.0]  # only the first point counts
    both = "<answer>[{'action': 'scroll'}, {'action': 'click', 'coordinate': [20, 30]}]</answer>"
    assert ui_r1_action(None, [both], [CLICK]) == [0.0] and ui_r1_coord(None, [both], [CLICK]) == [0.0]
    assert ui_r1_action(None, ["'action': 'click'", _ans("click")], [CLICK, CLICK]) == [0.0, 1.0]  # no answer block: 0
    # the kept quirk: a click without a point is (0, 0), inside only a box at the origin
    origin = "<answer>[{'action': 'click' ,'coordinate': [0, 0, 5, 5] }]</answer>"
    assert ui_r1_coord(None, [_ans("click"), _ans("click")], [CLICK, origin]) == [0.0, 1.0]


def test_ui_r1_format_regex_through_the_format_reward():
    fmt = FormatReward(pattern=r"<think>.*?</think>\s*<answer>.*?</answer>")
    assert fmt(None, [_ans("click", [1, 1]), "<answer>x</answer>", _ans("click", [1, 1]) + " extra"]) == [1.0, 0.0, 0.0]


OPTS = {"A": "circle", "B": "square", "C": "triangle", "D": "diamond"}


def test_multiple_choice_reads_one_option():
    cases = {"<answer>B</answer>": "B", "<answer>(C) triangle</answer>": "C", "<answer> D. diamond </answer>": "D",
             "<answer>Square.</answer>": "B", "<think>x</think><answer>A</answer><answer>C</answer>": "C"}  # fmt: skip
    for text, letter in cases.items():
        assert chosen_option(text, OPTS) == letter, text


def test_multiple_choice_cannot_be_fooled_by_listing_options():
    lists = ["<answer>A B C D</answer>", "<answer>ABCD</answer>", "<answer>A. circle or B. square</answer>",
             "<answer>E</answer>", "<answer>all of them</answer>", "A", "<answer></answer>"]  # fmt: skip
    assert mcq_accuracy_provisional(None, lists, ["A"] * len(lists), [OPTS] * len(lists)) == [0.0] * len(lists)
    assert mcq_accuracy_provisional(None, ["<answer>A</answer>"], ["A"], [OPTS]) == [1.0]
    with pytest.raises(ValueError, match="options must hold"):
        mcq_accuracy_provisional(None, ["x"], ["A"], ["A,B"])


def test_temporal_iou_values():
    assert temporal_iou((2, 6), (4, 8)) == pytest.approx(2 / 6)  # intersection 4..6, union 2..8
    assert temporal_iou((8, 4), (4, 8)) == 0.0  # a reversed span is not turned around (the release)
    assert parse_span("<answer> 3 and 5.5 </answer>") == (3.0, 5.5) and parse_span("at 1 then 2") == (1.0, 2.0)
    assert shaped_iou(1.0) == pytest.approx(0.8 + 0.01 * math.log(1.2))  # 0.801823
    assert shaped_iou(0.5) == pytest.approx(0.8 - (math.exp(0.3) - 1) / (math.e - 1))  # 0.596390
    reward = TemporalIoU()
    gold = ["<answer> 4.0 to 8.0 </answer>"] * 4
    got = reward(None, ["<answer> 2 to 6 </answer>", "2 to 6", "<answer>4 to 8</answer>", "<answer>soon</answer>"], answer=gold)
    assert got == pytest.approx([2 / 6 + 0.1, 2 / 6, 1.1, 0.0])
    shaped = TemporalIoU(shaping=True)(None, ["<answer>4 to 8</answer>"], answer=gold[:1])
    assert shaped == pytest.approx([0.801823 + 0.1], abs=1e-6)
    assert reward(None, ["<answer>1 to 2</answer>"], answer=["no span"]) == [0.0]


def test_temporal_iou_cannot_be_fooled_by_a_span_covering_everything():
    got = TemporalIoU()(None, ["<answer> 0 to 1000 </answer>", "<answer> 4 to 8 </answer> or <answer>0 to 9</answer>"],
                        answer=["<answer> 4.0 to 8.0 </answer>"] * 2)  # fmt: skip
    assert got[0] == pytest.approx(4 / 1000 + 0.1) and got[1] == pytest.approx(1.1)  # the first answer block decides
    assert gt_response({"answer": "<answer> 4 to 8 </answer>"}) == "<answer> 4.00 to 8.00 </answer>"
