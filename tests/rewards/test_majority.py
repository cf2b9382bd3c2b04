"""Majority-vote reward (TTRL): pseudo-labels from each group's most common answer."""

import pytest

from covey.rewards import MajorityVoteReward


def test_all_answers_differ_only_first_seen_gets_reward():
    out = MajorityVoteReward()(None, ["#### 1", "#### 2", "#### 3"], group=[0, 0, 0])
    assert out.scores == [1.0, 0.0, 0.0]
    assert out.metrics["majority_ratio"] == [pytest.approx(1 / 3)]


def test_equivalent_answers_vote_together_and_match_the_label():
    # "$5" and "5" share a vote key (2 of 4; "5.0" and "6" one each): label "$5" (first seen);
    # scores use math_equal, so "5.0" matches the label too
    out = MajorityVoteReward()(None, ["#### $5", "#### 6", "#### 5", "#### 5.0"], group=[7, 7, 7, 7])
    assert out.scores == [1.0, 0.0, 1.0, 1.0]


def test_label_accuracy_against_the_true_answer():
    out = MajorityVoteReward()(
        None, ["#### 2", "#### 2", "#### 3", "#### 9", "#### 9"], group=[0, 0, 0, 1, 1], answer=["3", "3", "3", "9", "9"]
    )
    # group 0: label 2 (wrong), group 1: label 9 (right)
    assert out.metrics["label_accuracy"] == [0.0, 1.0]
    # true rewards 0,0,1 vs pseudo 1,1,0 (all disagree); group 1: 1,1 vs 1,1
    assert out.metrics["reward_accuracy"] == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_no_extractable_answer_gives_zero():
    out = MajorityVoteReward(order=["gsm8k"])(None, ["none here", "nor here"], group=[0, 0], answer=["1", "1"])
    assert out.scores == [0.0, 0.0] and out.metrics["label_accuracy"] == [0.0]


def test_singleton_group_agrees_with_itself():
    assert MajorityVoteReward()(None, [r"\boxed{4}"], group=[3]).scores == [1.0]


def test_missing_group_column_is_named():
    with pytest.raises(ValueError, match="'group' column"):
        MajorityVoteReward()(None, ["#### 1"])
