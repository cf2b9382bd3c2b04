"""Length rewards: L1 target length and DAPO soft overlong punishment (formula in algos.shaping)."""

import pytest

from covey.rewards import SoftOverlongPunishment, TargetLengthReward, completion_lengths


def test_overlong_matches_dapo_vectors():
    # L_max 20480, L_cache 4096: expected = 16384; 18432 -> -(2048/4096) = -0.5; 20480 -> -1
    r = SoftOverlongPunishment(max_len=20480, buffer_len=4096)
    assert r(None, [""] * 4, completion_length=[16000, 16384, 18432, 20480]) == [0.0, 0.0, -0.5, -1.0]


def test_overlong_reads_token_ids_like_trl():
    r = SoftOverlongPunishment(max_len=4, buffer_len=2, penalty_factor=2.0)
    # expected = 2; lengths 2, 3, 4 -> 0, -(1/2)*2 = -1, -(2/2)*2 = -2
    assert r(None, ["", "", ""], completion_ids=[[1, 2], [1, 2, 3], [1, 2, 3, 4]]) == [0.0, -1.0, -2.0]


def test_overlong_rejects_bad_budget():
    with pytest.raises(ValueError, match="buffer_len"):
        SoftOverlongPunishment(max_len=10, buffer_len=20)


def test_target_length_is_zero_at_target_and_linear_away():
    r = TargetLengthReward(alpha=0.01)
    # |100 - 100| = 0; |100 - 50| * 0.01 = 0.5; |100 - 300| * 0.01 = 2
    assert r(None, ["", "", ""], target_length=[100, 100, 100], completion_length=[100, 50, 300]) == [0.0, -0.5, -2.0]


def test_target_length_without_target_is_an_error():
    with pytest.raises(ValueError, match="target_length"):
        TargetLengthReward()(None, ["x"], completion_length=[1])


def test_token_lengths_need_a_length_column():
    with pytest.raises(ValueError, match="completion_ids"):
        completion_lengths(["abc"], unit="tokens")
    assert completion_lengths(["abc", ""], unit="chars") == [3, 0]
