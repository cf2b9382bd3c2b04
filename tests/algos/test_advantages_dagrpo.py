"""dagrpo_provisional: hand-checked test vector, reduction to GRPO, edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError


def run(batch, **params):
    return ADVANTAGES["dagrpo_provisional"].bind({"score_column": "q", **params})(batch)


def batch_rq(r, q, groups=None, **kw):
    """Rewards in column 'acc' (weight 1) and the fine-grained score in column 'q' (weight 0)."""
    return rollouts([[a, b] for a, b in zip(r, q)], groups=groups, reward_names=["acc", "q"], reward_weights=[1.0, 0.0], **kw)


def test_spec_vector():
    # masks [[0,0,1,1],[0,0,1,0],[1,1,0,1],[1,0,1,0]] with tau 0.1 (|0.9 - 0.8| = 0.1 reaches tau)
    res = run(batch_rq([1, 1, 0, 0], [0.9, 0.85, 0.2, 0.8]))
    assert torch.allclose(res.advantages, torch.tensor([0.8660, 0.4330, -0.8660, -0.4330]), atol=1e-4)
    assert res.metrics["adv/dagrpo_provisional/masked_pair_frac"] == pytest.approx(4 / 12)  # (0,1),(1,3) both ways


def test_tau_zero_is_grpo_and_tau_changes_the_mask():
    b = batch_rq([1, 0, 0.3, 1, 0, 0, 1, 0.5], [0.5, 0.5, 0.5, 0.1, 0.1, 0.9, 0.2, 0.2], groups=[0, 0, 0, 1, 1, 1, 2, 2])
    grpo = ADVANTAGES["grpo"].bind({})(b).advantages
    assert torch.allclose(run(b, tau=0.0).advantages, grpo, atol=1e-6)
    # tau 0.5: group 0 (all q equal) and group 2 are fully masked; group 1 keeps only pairs with row 5
    a = run(b, tau=0.5).advantages
    sigma = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64).std()
    want = torch.tensor([0, 0, 0, (1 - 0) / 3 / (float(sigma) + 1e-6), 0, (0 - 1 + 0 - 0) / 3 / (float(sigma) + 1e-6), 0, 0])
    assert torch.allclose(a, want.float(), atol=1e-6)


def test_edge_cases_singletons_equal_rewards_empty_rows():
    assert torch.equal(run(batch_rq([1.0, 0.0], [0.9, 0.1], groups=[3, 8])).advantages, torch.zeros(2))
    assert torch.equal(run(batch_rq([0.5] * 4, [0.1, 0.9, 0.2, 0.8])).advantages, torch.zeros(4))
    res = run(batch_rq([1, 0, 1, 0], [0.9, 0.1, 0.5, 0.4], lengths=[3, 0, 0, 0], width=3))
    assert torch.isfinite(res.advantages).all() and res.advantages[0] > 0


def test_invariant_to_group_ids_and_row_order():
    r, q, g = [1, 0, 0.3, 1, 0, 0], [0.9, 0.2, 0.25, 0.6, 0.1, 0.7], [0, 0, 0, 1, 1, 1]
    a = run(batch_rq(r, q, groups=g)).advantages
    b = run(batch_rq(r, q, groups=[2**40 if x == 0 else -7 for x in g])).advantages
    assert torch.allclose(a, b)
    perm = torch.tensor([4, 0, 5, 2, 1, 3])
    assert torch.allclose(a[perm], run(batch_rq(r, q, groups=g).select(perm)).advantages, atol=1e-6)


def test_missing_or_unknown_score_column_is_a_clear_error():
    b = batch_rq([1, 0], [0.9, 0.1])
    with pytest.raises(RolloutsError, match=r"needs score_column.*columns are \['acc', 'q'\]"):
        ADVANTAGES["dagrpo_provisional"].bind({})(b)
    with pytest.raises(RolloutsError, match=r"score_column='judge' is not a reward column"):
        run(b, score_column="judge")
    with pytest.raises(RolloutsError, match="NaN/inf"):
        run(batch_rq([1, float("nan")], [0.9, 0.1]))
