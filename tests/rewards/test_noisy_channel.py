"""noisy_channel: a 0/1 reward through a verifier channel with false-positive / false-negative rates."""

import pytest

from covey.rewards import get_reward

FMT = {"name": "format", "params": {"tags": ["answer"]}}
GOOD, BAD = "<answer>4</answer>", "4"


def _scores(n_good, n_bad, **params):
    ch = get_reward("noisy_channel", reward=FMT, **params)
    prompts = [f"q{i}" for i in range(n_good + n_bad)]
    return ch(prompts=prompts, completions=[GOOD] * n_good + [BAD] * n_bad)


def test_a_clean_channel_changes_nothing():
    out = _scores(3, 2)
    assert out.scores == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert out.metrics["flipped"] == [0.0] * 5


def test_certain_errors_flip_every_verdict():
    assert _scores(2, 2, rho0=1.0, rho1=1.0).scores == [0.0, 0.0, 1.0, 1.0]
    assert _scores(2, 2, rho1=1.0).scores == [0.0, 0.0, 0.0, 0.0]  # rho0 = 0: fails stay fails


def test_flip_rates_match_the_channel():
    # 2000 passes at rho1 0.3, 2000 fails at rho0 0.1: binomial sd ~ 0.010 and 0.007, so 4 sd bounds
    out = _scores(2000, 2000, rho0=0.1, rho1=0.3, seed=7)
    fn = 1 - sum(out.scores[:2000]) / 2000
    fp = sum(out.scores[2000:]) / 2000
    assert abs(fn - 0.3) < 0.04 and abs(fp - 0.1) < 0.03


def test_verdicts_are_reproducible_and_repeats_get_their_own_coin():
    a = _scores(50, 50, rho0=0.5, rho1=0.5, seed=3).scores
    assert a == _scores(50, 50, rho0=0.5, rho1=0.5, seed=3).scores
    assert a != _scores(50, 50, rho0=0.5, rho1=0.5, seed=4).scores
    ch = get_reward("noisy_channel", reward=FMT, rho1=0.5, seed=1)
    same = ch(prompts=["q"] * 40, completions=[GOOD] * 40).scores  # one prompt, one text, 40 rows
    assert 0 < sum(same) < 40


@pytest.mark.parametrize("params", [{"rho0": 1.5}, {"rho1": -0.1}, {"reward": "format"}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(ValueError, match="noisy_channel"):
        get_reward("noisy_channel", **{"reward": FMT, **params})
