import math

import pytest

from covey.eval import maj_at_k, majority_vote, mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 1, 0.3),  # k=1 is c/n
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5) = 1 - 21/252 = 0.916667
        (16, 0, 4, 0.0),
        (16, 16, 4, 1.0),
        (4, 2, 3, 1.0),  # n-c = 2 < k = 3: every 3-subset holds a correct sample
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_matches_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_product_form_matches_binomials_for_large_n():
    # n=200 would overflow nothing here, but the product form must equal the exact ratio
    n, c, k = 200, 37, 10
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(TypeError, match="k must be an int"):
        pass_at_k(3, 1, 1.5)


def test_mean_pass_at_k_averages_problems_and_uses_threshold():
    # problem 0: n=5, c=2 -> 0.7; problem 1: n=5, c=1 -> 1 - C(4,2)/C(5,2) = 1 - 6/10 = 0.4
    results = [[1.0, 0.0, 0.0, 0.0, 1.0], [True, False, None, 0.1, False]]
    assert mean_pass_at_k(results, k=2) == pytest.approx(0.55)
    # with threshold 0.1 the partial-credit sample counts: problem 1 has c=2 -> 0.7
    assert mean_pass_at_k(results, k=2, threshold=0.1) == pytest.approx(0.7)


def test_mean_pass_at_k_needs_k_samples_per_problem():
    with pytest.raises(ValueError, match="problem 1 has 1 samples, fewer than k=2"):
        mean_pass_at_k([[1, 0], [1]], k=2)
    with pytest.raises(ValueError, match="empty"):
        mean_pass_at_k([], k=1)


def test_majority_vote_ties_go_to_first_seen():
    assert majority_vote(["b", "a", "a", "b"]) == ("b", 2)
    assert majority_vote(["x", "y", "z"]) == ("x", 1)  # TTRL: all differ -> first seen


def test_majority_vote_none_abstains():
    assert majority_vote([None, None]) == (None, 0)
    assert majority_vote([None, "3", None]) == ("3", 1)


def test_maj_at_k_groups_equivalent_answers():
    # first 3: {"0.5","1/2"} x2, {"3"} x1 -> winner "0.5" = 1/2
    assert maj_at_k(["0.5", "1/2", "3", "3", "3"], gold=r"\frac{1}{2}", k=3) == 1.0
    # first 5: "3" x3 wins
    assert maj_at_k(["0.5", "1/2", "3", "3", "3"], gold=r"\frac{1}{2}", k=5) == 0.0
    assert maj_at_k(["0.5", "1/2", "3", "3", "3"], gold="3", k=5) == 1.0


def test_maj_at_k_tie_and_all_abstain():
    # 2-2 tie between "4" (seen first) and "5"
    assert maj_at_k(["4", "5", "5", "4"], gold="4", k=4) == 1.0
    assert maj_at_k(["4", "5", "5", "4"], gold="5", k=4) == 0.0
    assert maj_at_k([None, None], gold="5", k=2) == 0.0


def test_maj_at_k_custom_equal_and_bad_k():
    same_case = lambda a, b: a.lower() == b.lower()  # noqa: E731
    assert maj_at_k(["A", "a", "b"], gold="A", k=3, equal=same_case) == 1.0
    with pytest.raises(ValueError, match="at least k=4"):
        maj_at_k(["1"], gold="1", k=4)
    with pytest.raises(ValueError, match="positive int"):
        maj_at_k(["1"], gold="1", k=0)


def test_docstring_examples_hold():
    import doctest

    import covey.eval.metrics as mod

    result = doctest.testmod(mod)
    assert result.attempted >= 5 and result.failed == 0
