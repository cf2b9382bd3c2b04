import pytest
import torch

from covey.algos.registry import ADVANTAGES
from covey.data.spo import BASELINE_KEY, SPOSampler, offline_prior, spo_rho, spo_weights
from covey.rollouts import RolloutsError
from tests.data._helpers import ids, items, one_step, reload, scored


def test_worked_example_from_the_spec():
    a, b = offline_prior([1, 1, 1, 1, 0, 0, 0, 0])  # 4/8 -> alpha = beta = 8 * 4.5 / 9 = 4
    assert (a, b) == (4.0, 4.0)
    assert spo_rho(0.03) == 0.875  # 2^-0.5 = 0.707, clipped up to 0.875
    assert spo_rho(0.0) == 0.96 and spo_rho(0.006) == pytest.approx(2 ** -0.1)
    s = SPOSampler([{"id": 1, "off": [1, 1, 1, 1, 0, 0, 0, 0]}], offline_key="off")
    s.observe(scored([1], [1]))
    assert s.alpha.item() == 4.5 and s.beta.item() == 3.5
    assert s.alpha.item() / (s.alpha.item() + s.beta.item()) == 0.5625


def test_prior_without_scores_and_weights_floor():
    assert offline_prior([]) == (0.5, 0.5)
    w = spo_weights(torch.tensor([1.0, 5.0, 0.0]), torch.tensor([0.0, 5.0, 1.0]), 0.05)
    assert w.tolist() == pytest.approx([0.05, 0.55, 0.05])


def test_observe_writes_the_pre_update_baseline_per_row():
    s = SPOSampler(items(3))
    s.alpha[0], s.beta[0] = 3.0, 1.0
    b = scored([100, 101, 100], [1, 0, 0])
    s.observe(b)
    assert b.extras[BASELINE_KEY].tolist() == [0.75, 0.5, 0.75]
    # two rows of prompt 100 in one visit: alpha = 0.875*3 + 1, beta = 0.875*1 + 1
    assert s.alpha[0].item() == pytest.approx(3.625) and s.beta[0].item() == pytest.approx(1.875)


def test_spo_advantage_by_hand():
    b = scored([1, 2, 3], [1, 0, 1])
    b.extras[BASELINE_KEY] = torch.tensor([0.5, 0.5, 0.75])
    raw = torch.tensor([0.5, -0.5, 0.25], dtype=torch.float64)
    want = (raw - raw.mean()) / (raw.std() + 1e-8)
    out = ADVANTAGES.get("spo").bind()(b)
    assert torch.allclose(out.advantages.double(), want, atol=1e-6)
    assert ADVANTAGES.get("spo").bind({"normalise": False})(b).advantages.tolist() == [0.5, -0.5, 0.25]


def test_spo_advantage_without_the_sampler_names_it():
    with pytest.raises(RolloutsError, match="sampler: {name: spo}"):
        ADVANTAGES.get("spo").bind()(scored([1, 2], [1, 0]))


def test_draws_are_single_stream_prioritised_and_never_fail():
    s = SPOSampler(items(4), seed=0)
    s.alpha = torch.tensor([50.0, 1.0, 50.0, 25.0], dtype=torch.float64)
    s.beta = torch.tensor([0.01, 50.0, 0.01, 25.0], dtype=torch.float64)
    got = [i for _ in range(50) for i in ids(s.next(1))]
    assert got.count(103) > 25  # p=0.5 weight 0.55 vs ~0.05-0.19 for the others
    assert s.group_sizes(s.items[:3], 8) == [1, 1, 1]
    assert len(s.next(9)) == 9  # more than the pool: with replacement


def test_state_round_trip_draws_the_same():
    s = SPOSampler(items(12), seed=2, candidates=6)
    for _ in range(3):
        got = ids(s.next(4))
        s.observe(scored(got, [1, 0, 0, 1]))
    r = reload(s, lambda: SPOSampler(items(12), seed=2, candidates=6))
    assert [ids(s.next(4)) for _ in range(3)] == [ids(r.next(4)) for _ in range(3)]


def test_one_training_step(tmp_path):
    m = one_step(tmp_path, {"name": "spo"}, algo={"preset": "grpo", "kl": None, "advantage": {"name": "spo"}})
    assert m["prompts/rollouts_per_prompt_mean"] == 1.0 and "adv/spo/baseline_mean" in m
