"""urpo_ranking_provisional (URPO, arXiv 2507.17515, reconstructed): parsing, Kendall's tau by hand, and what a
policy cannot get full marks with."""

import itertools

import pytest

from covey.rewards import get_reward
from covey.rewards.ranking import kendall_tau, parse_ranking


def test_parse_takes_the_last_line_with_a_full_ranking():
    assert parse_ranking("I think [3] is worst.\nRanking: [2] > [1] > [3]", 3) == [2, 1, 3]
    assert parse_ranking("2, 1, 3\nso 3 then 1", 3) == [2, 1, 3]  # the last line names only 2 numbers: skipped
    assert parse_ranking("1 > 1 > 2", 3) is None and parse_ranking("no ranking", 3) is None
    assert parse_ranking("4 > 1 > 2", 3) is None  # not a permutation of 1..3


def test_kendall_tau_by_hand():
    assert kendall_tau([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert kendall_tau([4, 3, 2, 1], [1, 2, 3, 4]) == -1.0
    # one swapped adjacent pair of 6: (5 - 1) / 6
    assert kendall_tau([2, 1, 3, 4], [1, 2, 3, 4]) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="two candidates"):
        kendall_tau([1], [1])


def test_modes():
    fn = get_reward("urpo_ranking_provisional", mode="top1")
    assert fn(["q"] * 2, ["3 > 1 > 2", "2 > 3 > 1"], ranking=[[3, 2, 1]] * 2).scores == [1.0, 0.0]
    kendall = get_reward("urpo_ranking_provisional")
    assert kendall(["q"], ["3 > 2 > 1"], ranking=[[3, 2, 1]]).scores == [1.0]
    with pytest.raises(ValueError, match="permutation of 1..m"):
        kendall(["q"], ["1"], ranking=[[1]])


def test_no_fixed_answer_gets_full_marks_over_every_gold_ranking():
    """A policy that always writes the same ranking cannot do better than chance: averaged over every gold order
    of 4 candidates, its Kendall reward is exactly 1/2 and its top-1 reward 1/4; echoing nothing scores 0."""
    golds = [list(p) for p in itertools.permutations([1, 2, 3, 4])]
    fn = get_reward("urpo_ranking_provisional")
    top = get_reward("urpo_ranking_provisional", mode="top1")
    for fixed in ("1 > 2 > 3 > 4", "4, 3, 2, 1"):
        assert sum(fn(["q"] * 24, [fixed] * 24, ranking=golds).scores) / 24 == pytest.approx(0.5)
        assert sum(top(["q"] * 24, [fixed] * 24, ranking=golds).scores) / 24 == pytest.approx(0.25)
    assert fn(["q"], ["1 2 3 4 1 2 3 4"], ranking=[[1, 2, 3, 4]]).scores == [0.0]  # a list with repeats is no ranking
