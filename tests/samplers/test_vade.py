import pytest
import torch

from covey.samplers import SAMPLERS
from covey.samplers.vade import VadeSampler, decayed_posterior, posterior_update, thompson_scores
from tests.samplers._helpers import ids, items, one_step, reload, scored


def test_decay_and_update_by_hand():
    # a0=1, lambda_long=0.9: alpha=3, beta=1 last seen 2 steps ago -> d = 0.81
    a, b = decayed_posterior(torch.tensor([3.0]), torch.tensor([1.0]), torch.tensor([2]), 1.0, 0.9)
    assert a.item() == pytest.approx(1 + 0.81 * 2) and b.item() == pytest.approx(1.0)
    # 3 of 4 correct, lambda_short=0.5: alpha = 0.5*2.62 + 3 = 4.31, beta = 0.5*1 + 1 = 1.5
    a2, b2 = posterior_update(a, b, torch.tensor([3.0]), torch.tensor([4.0]), 0.5)
    assert a2.item() == pytest.approx(4.31) and b2.item() == pytest.approx(1.5)


def test_thompson_scores_are_seeded_and_peak_at_one_half():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a, b = torch.tensor([50.0, 500.0, 1.0]), torch.tensor([50.0, 1.0, 500.0])
    s1, s2 = thompson_scores(a, b, g1), thompson_scores(a, b, g2)
    assert torch.equal(s1, s2)
    assert s1[0] > 0.2 and s1[1] < 0.05 and s1[2] < 0.05  # p~0.5 scores ~0.25, p~0/1 ~0


def test_observe_updates_the_posterior_of_the_batch_prompts():
    s = VadeSampler(items(4), seed=0, a0=1.0, lambda_short=0.5, lambda_long=1.0)
    s.next(2, 4)
    s.observe(scored([100, 100, 100, 100, 101, 101], [1, 1, 1, 0, 0, 0]))
    assert s.alpha[:2].tolist() == [0.5 + 3, 0.5 + 0] and s.beta[:2].tolist() == [0.5 + 1, 0.5 + 2]
    assert s.alpha[2:].tolist() == [1.0, 1.0] and s.t == 1


def test_concentrates_on_prompts_near_one_half():
    s = VadeSampler(items(6), seed=1)
    s.alpha = torch.tensor([20.0, 1.0, 20.0, 1.0, 10.0, 10.0], dtype=torch.float64)
    s.beta = torch.tensor([1.0, 20.0, 1.0, 20.0, 10.0, 10.0], dtype=torch.float64)
    counts = torch.zeros(6)
    for _ in range(20):
        for i in ids(s.next(2, 4)):
            counts[i - 100] += 1
        s.pending.zero_()
    assert counts[4] + counts[5] > 30


def test_no_repeats_before_observe_and_never_fails_to_fill():
    s = VadeSampler(items(3), seed=0)
    first = ids(s.next(2, 4))
    second = ids(s.next(2, 4))  # only one unseen prompt left: takes it, then repeats
    assert len(set(first)) == 2 and second[0] not in first and len(second) == 2
    assert len(s.next(7, 4)) == 7  # more than the pool


def test_state_round_trip_draws_the_same():
    s = VadeSampler(items(10), seed=3)
    for _ in range(3):
        got = ids(s.next(3, 4))
        s.observe(scored(got * 2, [1, 0, 1, 0, 0, 1]))
    r = reload(s, lambda: VadeSampler(items(10), seed=3))
    assert [ids(s.next(3, 4)) for _ in range(4)] == [ids(r.next(3, 4)) for _ in range(4)]
    assert "vade" in SAMPLERS


def test_bad_params_name_the_key():
    with pytest.raises(ValueError, match="lambda_short"):
        VadeSampler(items(2), lambda_short=0.0)


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "vade", "lambda_short": 0.7})
    assert "sampler/vade/p_mean" in m and m["prompts/unique"] == 4.0


def test_the_beta_entropy_information_gain_would_prefer_extreme_prompts():
    """Why covey keeps p (1 - p) while the paper's objective is unread: the expected entropy drop of a uniform
    Beta prior after G = 2 rollouts at p, sum_k Bin(k; 2, p) (H(Beta(1,1)) - H(Beta(1+k, 3-k))), is larger at
    p = 0.9 than at p = 0.5 (the numbers docs/sampling.md quotes), where p (1 - p) is largest."""
    from torch.distributions import Beta, Binomial

    def gain(p):
        post = [float(Beta(torch.tensor(1.0 + k), torch.tensor(3.0 - k)).entropy()) for k in range(3)]
        w = Binomial(2, torch.tensor(p)).log_prob(torch.arange(3.0)).exp().tolist()
        return float(Beta(torch.tensor(1.0), torch.tensor(1.0)).entropy()) - sum(a * b for a, b in zip(w, post))

    assert gain(0.5) == pytest.approx(0.2785, abs=1e-4) and gain(0.9) == pytest.approx(0.3767, abs=1e-4)
    assert gain(0.9) > gain(0.5) and 0.9 * 0.1 < 0.5 * 0.5
    from covey.samplers import vade

    assert "PROVISIONAL" in vade.__doc__
