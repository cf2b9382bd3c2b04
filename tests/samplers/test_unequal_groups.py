"""Groups of unequal size (DARS, XRPO, BroRL-style allocation) through the advantage estimators."""

import pytest
import torch

import covey.algos.advantages  # noqa: F401  (registers the estimators)
from covey.algos.registry import ADVANTAGES
from covey.rollouts import RolloutsError
from tests.algos._make import rollouts
from tests.samplers._helpers import one_step

R = [1, 0, 0, 1, 0, 1, 1, 0, 1]  # groups of 3, 5 and 1 rows
G = [0, 0, 0, 1, 1, 1, 1, 1, 2]


def _batch():
    return rollouts(R, G, lengths=[3, 4, 2, 5, 1, 3, 2, 4, 3], logprobs=[-0.5, -1, -2, -0.3, -0.7, -1.1, -0.9, -0.2, -0.4],
                    entropies=[1.0] * 9, ref_logprobs=[-1.0] * 9)  # fmt: skip


def test_grpo_by_hand():
    # group 0: mean 1/3, unbiased std sqrt(1/3); group 1: mean 0.6, std sqrt(0.3); singleton -> 0
    s0, s1 = (1 / 3) ** 0.5, 0.3**0.5
    want = [(2 / 3) / s0, (-1 / 3) / s0, (-1 / 3) / s0, 0.4 / s1, -0.6 / s1, 0.4 / s1, 0.4 / s1, -0.6 / s1, 0.0]
    got = ADVANTAGES.get("grpo").bind({"eps": 0.0})(_batch()).advantages
    assert got.tolist() == pytest.approx(want, abs=1e-6)


def test_rloo_by_hand():
    # leave-one-out means: group 0 (1,0,0): 0, .5, .5; group 1 (1,0,1,1,0): .5, .75, .5, .5, .75
    want = [1.0, -0.5, -0.5, 0.5, -0.75, 0.5, 0.5, -0.75, 0.0]
    assert ADVANTAGES.get("rloo").bind()(_batch()).advantages.tolist() == pytest.approx(want)


def test_mc_grpo_by_hand():
    # group 0 sorted (0,0,1): median slot 1 = row 2 (pivot), med 0, MAD 0 -> A = r / 1e-3
    # group 1 sorted (0,0,1,1,1): slot 2 = row 3 (pivot), med 1, MAD 0; singleton: its row is the pivot
    out = ADVANTAGES.get("mc_grpo").bind()(_batch())
    assert out.advantages.tolist() == pytest.approx([1000.0, 0, 0, 0, -1000.0, 0, 0, -1000.0, 0])
    assert out.sample_mask.tolist() == [1, 1, 0, 0, 1, 1, 1, 1, 0]


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_every_estimator_handles_unequal_groups_or_refuses_by_name(name):
    batch = _batch()
    batch.baseline = torch.full((9,), 0.5)
    try:
        out = ADVANTAGES.get(name).bind()(batch)
    except RolloutsError as e:  # refusals must name the estimator and what it needs
        assert repr(name) in str(e), str(e)
        return
    assert out.advantages.shape[0] == 9 and torch.isfinite(out.advantages).all()


@pytest.mark.parametrize("preset", ["grpo", "rloo", "mc_grpo"])
def test_one_step_with_dars_groups(tmp_path, preset):
    m = one_step(tmp_path, rollout={"prompts_per_step": 2, "group_size": 3, "strategy": {"name": "dars", "n_max": 5, "filter": False}},
                 algo={"preset": preset, "kl": None})  # fmt: skip
    assert m["dars/extra_rollouts"] > 0 and "adv/mean" in m
