"""spo_tree: hand-checked tree vector, the code's recursive node values, options, edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError

RAW = {"per_edge": False, "drop_zero": False, "prob_threshold": None, "whiten": False}


def run(batch, **params):
    return ADVANTAGES["spo_tree"].bind(params)(batch)


def tree(rewards, paths, seg=2, groups=None, logprobs=None, lengths=None):
    width = seg * max(len(p) for p in paths)
    b = rollouts(rewards, groups=groups, width=width, lengths=lengths, logprobs=logprobs)
    b.tree_path = [tuple(p) for p in paths]
    b.segment_tokens = seg
    return b


# root -> a (leaves 1, 0, 1), b (leaves 0, 0, 0); two segments of 2 tokens
SPEC = dict(rewards=[1, 0, 1, 0, 0, 0], paths=[(0, 2), (0, 3), (0, 4), (1, 5), (1, 6), (1, 7)])


def test_spec_vector():
    a = run(tree(**SPEC), **RAW).advantages
    third = 1 / 3
    want = torch.tensor([[third] * 2 + [third] * 2, [third] * 2 + [-2 * third] * 2, [third] * 2 + [third] * 2,
                         [-third] * 2 + [0, 0], [-third] * 2 + [0, 0], [-third] * 2 + [0, 0]])  # fmt: skip
    assert torch.allclose(a, want, atol=1e-6)


def test_node_value_is_the_mean_of_children_not_of_leaves():
    # root -> a (leaf, r = 1), b -> (leaves r = 0, r = 1): V(b) = .5, V(root) = mean(1, .5) = .75 (leaf mean: 2/3)
    b = tree([1, 0, 1], [(0,), (1, 2), (1, 3)], lengths=[2, 4, 4])
    a = run(b, **RAW).advantages
    assert torch.allclose(a, torch.tensor([[0.25, 0.25, 0, 0], [-0.25, -0.25, -0.5, -0.5], [-0.25, -0.25, 0.5, 0.5]]), atol=1e-6)
    g = run(b, **{**RAW, "adv": "grpo"}).advantages  # / population std of the siblings' values: .25 at the root, .5 under b
    assert torch.allclose(g, torch.tensor([[1.0, 1, 0, 0], [-1, -1, -1, -1], [-1, -1, 1, 1]]), atol=1e-5)


def test_per_edge_weights_shared_segments_once():
    a = run(tree(**SPEC), **{**RAW, "per_edge": True}).advantages
    assert torch.allclose(a[0, :2], torch.full((2,), 1 / 9), atol=1e-6)  # edge root->a shared by 3 leaves
    assert torch.allclose(a[1, 2:], torch.full((2,), -2 / 3), atol=1e-6)  # leaf edges are not shared
    assert torch.allclose(a[3, :2] * 3, torch.full((2,), -1 / 3), atol=1e-6)


def test_drop_zero_prob_mask_and_whitening():
    lp = [[-0.05, -1.0, -1.0, -0.01]] * 6  # p = [0.95, 0.37, 0.37, 0.99]: tokens 0 and 3 are masked
    b = tree(**SPEC, logprobs=lp)
    a = run(b, per_edge=False, drop_zero=True, prob_threshold=0.9, whiten=False).advantages
    third = 1 / 3
    want = torch.tensor([[0, third, third, 0], [0, third, -2 * third, 0], [0, third, third, 0],
                         [0, -third, 0, 0], [0, -third, 0, 0], [0, -third, 0, 0]])  # fmt: skip
    assert torch.allclose(a, want, atol=1e-6)
    # whitening over the kept tokens (row-major): 9 values, unbiased var, then only kept tokens are non-zero
    kept = torch.tensor([third, third, third, -2 * third, third, third, -third, -third, -third], dtype=torch.float64)
    w = run(b, per_edge=False).advantages.double()
    assert torch.allclose(w[want != 0], (kept - kept.mean()) * torch.rsqrt(kept.var() + 1e-8), atol=1e-5)
    assert torch.equal(w[want == 0], torch.zeros(int((want == 0).sum()), dtype=torch.float64))
    d = run(tree(**SPEC), **{**RAW, "drop_zero": True}).advantages  # zero edges stay zero
    assert torch.equal(d[3:, 2:], torch.zeros(3, 2))


def test_edge_cases_and_errors():
    assert torch.equal(run(tree([1.0], [(0, 1)])).advantages, torch.zeros(1, 4))  # a single path
    assert torch.equal(run(tree([0.5] * 6, SPEC["paths"])).advantages, torch.zeros(6, 4))  # equal rewards
    two = tree([1, 0, 0, 1], [(0,), (1,), (0,), (1,)], groups=[0, 0, 5, 5])  # ids restart per group
    assert torch.allclose(run(two, **RAW).advantages[:, :2], torch.tensor([[0.5] * 2, [-0.5] * 2, [-0.5] * 2, [0.5] * 2]))
    with pytest.raises(RolloutsError, match="tree_path"):
        run(rollouts([1.0, 0.0]))
    b = tree(**SPEC)
    b.segment_tokens = None
    with pytest.raises(RolloutsError, match="segment_tokens"):
        run(b)
    with pytest.raises(RolloutsError, match="both a leaf and an inner node"):
        run(tree([1.0, 0.0], [(0,), (0, 1)]))
