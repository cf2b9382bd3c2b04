"""polychromic: hand-checked test vectors, both key sources, set modes, edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError


def run(batch, **params):
    return ADVANTAGES["polychromic"].bind(params)(batch)


def batch_rk(r, keys, groups=None, **kw):
    """Rewards in column 'acc' and answer classes in column 'answer' (weight 0)."""
    return rollouts([[a, b] for a, b in zip(r, keys)], groups=groups, reward_names=["acc", "answer"],
                    reward_weights=[1.0, 0.0], **kw)  # fmt: skip


def test_spec_vector_all_pairs_with_a_class_column():
    # r = [1, 1, 0, 1], keys [a, a, b, c]: f = [.5, .5, 1, .5, 1, .5], baseline 2/3
    res = run(batch_rk([1, 1, 0, 1], [1, 1, 2, 3]), key="answer")
    assert torch.allclose(res.advantages, torch.tensor([0.0, 0.0, -1 / 6, 1 / 6]), atol=1e-6)
    assert res.metrics["adv/polychromic/distinct_frac"] == pytest.approx(3 / 4)


def test_spec_vector_with_identical_completions_as_the_key():
    ids = [[5, 6, 7], [5, 6, 7], [5, 8, 7], [9, 6, 7]]  # rows 0 and 1 are the same completion
    res = run(rollouts([1, 1, 0, 1], ids=ids))
    assert torch.allclose(res.advantages, torch.tensor([0.0, 0.0, -1 / 6, 1 / 6]), atol=1e-6)
    # padding does not make rows differ; a different real token does
    padded = rollouts([1, 1, 0, 1], ids=[[5, 6, 0], [5, 6, 3], [5, 8, 0], [9, 6, 0]], lengths=[2, 2, 2, 2])
    assert torch.allclose(run(padded).advantages, torch.tensor([0.0, 0.0, -1 / 6, 1 / 6]), atol=1e-6)


def test_spec_partition_and_a_hand_checked_triple():
    b = batch_rk([1, 1, 0, 1], [1, 1, 2, 3])
    assert torch.equal(run(b, key="answer", sets="partition").advantages, torch.zeros(4))  # f = [.5, .5]
    # n = 3, all 4 triples: f = [4/9, 2/3, 2/3, 2/3], baseline 11/18 -> A = [-1/54, -1/54, -1/54, 1/18]
    a = run(b, key="answer", set_size=3).advantages
    assert torch.allclose(a, torch.tensor([-1 / 54, -1 / 54, -1 / 54, 1 / 18]), atol=1e-6)
    # partition with a leftover row: sets {0,1}, {2,3}; row 4 is in no set
    c = batch_rk([1, 0, 1, 1, 1], [1, 2, 3, 3, 4])
    assert torch.allclose(run(c, key="answer", sets="partition").advantages, torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0]))
    d = batch_rk([1, 0, 1, 1, 0], [1, 2, 3, 4, 4])  # f({0,1}) = .5, f({2,3}) = 1 -> A = [-.25, -.25, .25, .25, 0]
    assert torch.allclose(run(d, key="answer", sets="partition").advantages, torch.tensor([-0.25, -0.25, 0.25, 0.25, 0.0]))


def test_set_size_one_is_dr_grpo_and_groups_of_mixed_sizes():
    r, g = [1, 0, 0.3, 1, 0, 0.5, 0.2], [0, 0, 0, 1, 1, 2, 2]
    b = batch_rk(r, [1, 2, 3, 4, 5, 6, 7], groups=g)
    assert torch.allclose(run(b, set_size=1, key="answer").advantages, ADVANTAGES["dr_grpo"].bind({})(b).advantages, atol=1e-6)
    # groups of 3 and 2 in one batch, all-distinct answers: n = 2 -> group of 2 has one set (A = 0)
    a = run(b, key="answer").advantages
    assert torch.equal(a[3:], torch.zeros(4))
    f = torch.tensor([0.5, 0.65, 0.15])  # pairs (0,1), (0,2), (1,2) of group 0
    dev = f - f.mean()
    assert torch.allclose(a[:3], torch.stack([(dev[0] + dev[1]) / 2, (dev[0] + dev[2]) / 2, (dev[1] + dev[2]) / 2]), atol=1e-6)


def test_edge_cases():
    assert torch.equal(run(batch_rk([1.0, 0.0], [1, 2], groups=[4, 9]), key="answer").advantages, torch.zeros(2))  # G = 1
    assert torch.equal(run(batch_rk([1.0, 0.0], [1, 2]), key="answer", set_size=3).advantages, torch.zeros(2))  # G < n
    assert torch.equal(run(batch_rk([1.0] * 4, [7] * 4), key="answer").advantages, torch.zeros(4))  # identical correct answers
    assert torch.equal(run(batch_rk([0.5] * 4, [1, 2, 3, 4]), key="answer").advantages, torch.zeros(4))  # equal rewards
    # equal non-zero rewards, duplicated answers: the rare answer gains (f = [.5, 1, 1] for (0,1), (0,2), (1,2), baseline 5/6)
    rare = run(batch_rk([1.0] * 3, [4, 4, 9]), key="answer").advantages
    assert torch.allclose(rare, torch.tensor([-1 / 12, -1 / 12, 1 / 6]), atol=1e-6)
    res = run(rollouts([1, 0, 1, 0], lengths=[3, 0, 0, 0], width=3))  # empty completions share one class
    assert torch.isfinite(res.advantages).all()


def test_invariant_to_group_ids_and_row_order_for_all_subsets():
    r, keys, g = [1, 1, 0, 1, 0, 1, 1], [1, 1, 2, 3, 1, 2, 2], [0, 0, 0, 0, 1, 1, 1]
    a = run(batch_rk(r, keys, groups=g), key="answer").advantages
    b = run(batch_rk(r, keys, groups=[-3 if x == 0 else 2**40 for x in g]), key="answer").advantages
    assert torch.allclose(a, b)
    perm = torch.tensor([6, 2, 0, 5, 3, 1, 4])
    assert torch.allclose(a[perm], run(batch_rk(r, keys, groups=g).select(perm), key="answer").advantages, atol=1e-6)


def test_bad_key_and_too_many_sets_are_clear_errors():
    with pytest.raises(RolloutsError, match=r"key='answer' is neither 'completion' nor a reward column"):
        run(rollouts([1, 0]), key="answer")
    with pytest.raises(RolloutsError, match=r"C\(40, 10\).*use sets: partition"):
        run(rollouts([1.0, 0.0] * 20), set_size=10)
    assert run(rollouts([1.0, 0.0] * 20), set_size=10, sets="partition").advantages.shape == (40,)
