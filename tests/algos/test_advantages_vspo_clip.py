"""vspo_clip_provisional (PRS + VSPO, arXiv 2512.07478, reconstructed): the smoothed scale and the clip by hand."""

import math

import pytest
import torch

from covey.algos import ADVANTAGES
from tests.algos._make import rollouts


def _adv(batch, **p):
    return ADVANTAGES.get("vspo_clip_provisional").bind(p)(batch)


def test_smoothed_scale_and_clip_by_hand():
    # group 0: [1, 0, 0, 0] (mean 0.25, sigma_g^2 = 0.25); group 1: [1, 1, 0, 0] (sigma_g^2 = 1/3);
    # batch of 8 with 3 ones: sigma_b^2 = (3 x 0.625^2 + 5 x 0.375^2) / 7 = 0.267857
    batch = rollouts([1, 0, 0, 0, 1, 1, 0, 0], groups=[0] * 4 + [1] * 4)
    sb2 = (3 * 0.625**2 + 5 * 0.375**2) / 7
    s0 = math.sqrt(0.5 * 0.25 + 0.5 * sb2)
    s1 = math.sqrt(0.5 / 3 + 0.5 * sb2)
    out = _adv(batch, lam=0.5, clip=10.0, eps=0.0)
    assert out.advantages.tolist() == pytest.approx([0.75 / s0] + [-0.25 / s0] * 3 + [0.5 / s1] * 2 + [-0.5 / s1] * 2, abs=1e-6)
    clipped = _adv(batch, lam=0.5, clip=1.0, eps=0.0)
    assert clipped.advantages[0] == pytest.approx(1.0) and clipped.metrics["adv/vspo_clip_provisional/clipped_frac"] == 0.125


def test_lam_one_and_no_clip_is_grpo():
    batch = rollouts([1, 0, 0, 1, 1, 0], groups=[0, 0, 0, 1, 1, 1])
    grpo = ADVANTAGES.get("grpo").bind({"eps": 1e-6})(batch)
    assert torch.allclose(_adv(batch, lam=1.0, clip=1e9).advantages, grpo.advantages, atol=1e-6)


def test_a_near_degenerate_group_no_longer_dominates():
    # one success in eight: GRPO gives the success 2.47; with a batch that holds an even group the smoothed scale is wider
    batch = rollouts([1] + [0] * 7 + [1] * 4 + [0] * 4, groups=[0] * 8 + [1] * 8)
    grpo = ADVANTAGES.get("grpo").bind({})(batch).advantages
    vspo = _adv(batch, lam=0.0, clip=2.0).advantages
    assert float(grpo[0]) == pytest.approx(7 / 8 / math.sqrt(1 / 8), rel=1e-4) and float(vspo[0]) <= 2.0
    assert _adv(rollouts([1, 1], groups=[0, 0])).advantages.tolist() == [0.0, 0.0]
