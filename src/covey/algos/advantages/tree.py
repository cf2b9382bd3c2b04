"""Tree-structured advantages for tree rollouts (`Rollouts.tree_path`: each leaf's node ids, root to leaf).

    treepo        TreePO sub-group averaging: a leaf's deviation from every ancestor subtree's mean,
                  averaged ([N]).
    branch_grpo   BranchGRPO reward fusion + depth-wise normalisation: each node's value is the mean
                  of its leaves' rewards (or the children's values weighted by a softmax over the
                  child edges' log-probs), normalised against the other nodes at its depth; a token
                  gets the advantage of the node its segment leads to, and each edge is trained once
                  ([N, T] advantages and an [N, T] sample_mask).

Rows are grouped by (group id, path prefix) with a dictionary: trees are small (one per prompt), so
the Python loop over rows is not the cost of a step. Reward arithmetic is float64.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, PosFloat, groups_of, lengths, result, scalar_rewards, whiten
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["branch_grpo", "tree_depth_deviations", "treepo"]


def _paths(batch: Rollouts, method: str) -> list[tuple[int, ...]]:
    if batch.tree_path is None:
        raise RolloutsError(
            f"advantage {method!r} needs Rollouts.tree_path (tree rollouts): use rollout.strategy treepo, branch "
            "or latr, or pick another estimator"
        )
    return [tuple(p) for p in batch.tree_path]


def tree_depth_deviations(r: list[float], groups: list[int], paths: list[tuple[int, ...]], *, root_group: bool = True,
                          weight: Literal["average", "group_size"] = "average") -> list[float]:  # fmt: skip
    """TreePO's per-leaf combination of ancestor-subgroup deviations (plain lists in, list out).

    Subgroup of leaf i at depth d: the leaves sharing (group, path[:d+1]). root_group=True adds the
    whole prompt group (paper reading); False reproduces the code, whose coarsest subgroup is the
    first-level subtree (a singleton there counts with mean 0). Deeper subgroups count only with
    more than one leaf. weight "average": plain mean of the deviations; "group_size": weighted by
    subgroup size.
    """
    sums: dict[tuple, list[float]] = {}

    def key(i: int, d: int) -> tuple:
        return (groups[i],) + (paths[i][: d + 1] if d >= 0 else ())

    first = -1 if root_group else 0
    depth = max((len(p) for p in paths), default=0)
    for i in range(len(r)):
        for d in range(first, len(paths[i])):
            s = sums.setdefault(key(i, d), [0.0, 0])
            s[0] += r[i]
            s[1] += 1
    out = []
    for i in range(len(r)):
        terms = []
        for d in range(first, min(depth, len(paths[i]))):
            total, n = sums[key(i, d)]
            if d == first or n > 1:
                mean = total / n if n > 1 or d == -1 else 0.0  # code: a singleton's mean is 0
                terms.append((r[i] - mean, n))
        if not terms:
            out.append(0.0)
        elif weight == "average":
            out.append(sum(t for t, _ in terms) / len(terms))
        else:
            out.append(sum(t * n for t, n in terms) / sum(n for _, n in terms))
    return out


@register_advantage(
    "treepo", group_relative=True, requires=("tree_path",),
    paper="TreePO: Bridging the Gap of Policy Optimization and Efficacy and Inference Efficiency with Heuristic Tree-based Modeling",
    arxiv="2508.17445",
)
def treepo(
    batch: Rollouts,
    *,
    root_group: bool = True,
    weight: Literal["average", "group_size"] = "average",
    whiten_batch: bool = True,
    eps: NonNegFloat = 1e-8,
) -> AdvantageResult:
    """TreePO tree advantage: A_i = mean over ancestor subgroups S of (r_i - mean_S r), then batch-whitened.

    Code: `compute_tree_reinforce_plus_plus_baseline_outcome_advantage` (TreePO core_algos.py), recipe
    settings adv_weight_strategy "average", tree_subgroup_opt 14. root_group=True (default)
    includes the whole prompt group as the coarsest subgroup (paper reading, UNVERIFIED); False is the
    code's version (coarsest = first-level subtree). whiten_batch: RF++-baseline masked whitening over
    the batch's tokens (the code's final step). Needs `tree_path` (rollout.strategy treepo/branch/latr).
    """
    paths = _paths(batch, "treepo")
    g = groups_of(batch)
    r = scalar_rewards(batch)
    adv = torch.tensor(tree_depth_deviations(r.tolist(), g.index.tolist(), paths, root_group=root_group, weight=weight),
                       dtype=F64)  # fmt: skip
    if whiten_batch:
        adv = whiten(adv, lengths(batch), eps=eps)
    depth = sum(len(p) for p in paths) / max(len(paths), 1)
    return result("treepo", adv, batch, g, metrics={"mean_depth": depth})


def branch_node_values(paths: list[tuple[int, ...]], groups: list[int], rewards: list[float],
                       edge_logp: dict[tuple, float] | None = None) -> dict[tuple, float]:  # fmt: skip
    """BranchGRPO's `compute_node_rewards_from_leaves`: {(group, path prefix): value} for every node
    (the root of group g is (g,)). A leaf's value is its reward. An internal node's value is the mean
    of all its leaf descendants' rewards (edge_logp None: the code's default), or, with `edge_logp`
    {(group, child prefix): log-prob of the edge into that child} (the code's tree_prob_weighted),
    sum_c softmax_c(edge log-prob) * value(c) over its children, bottom up (one child: its value)."""
    leaves: dict[tuple, list[float]] = {}
    children: dict[tuple, list[tuple]] = {}
    for p, g, r in zip(paths, groups, rewards):
        for d in range(len(p) + 1):
            node = (g,) + tuple(p[:d])
            leaves.setdefault(node, []).append(r)
            if d < len(p):
                kids = children.setdefault(node, [])
                child = (g,) + tuple(p[: d + 1])
                if child not in kids:
                    kids.append(child)
    if edge_logp is None:
        return {node: sum(rs) / len(rs) for node, rs in leaves.items()}
    value: dict[tuple, float] = {}
    for node in sorted(leaves, key=len, reverse=True):  # deepest first
        kids = children.get(node)
        if not kids:
            value[node] = sum(leaves[node]) / len(leaves[node])  # a leaf (the same path twice: their mean)
        elif len(kids) == 1:
            value[node] = value[kids[0]]
        else:
            w = torch.tensor([edge_logp[c] for c in kids], dtype=F64).softmax(0)
            value[node] = float(sum(float(wi) * value[c] for wi, c in zip(w, kids)))
    return value


@register_advantage(
    "branch_grpo", group_relative=True, requires=("tree_path", "segment_tokens"),
    paper="BranchGRPO: Stable and Efficient GRPO with Structured Branching in Diffusion Models",
    arxiv="2509.06040",
)
def branch_grpo(
    batch: Rollouts,
    *,
    fusion: Literal["uniform", "prob_weighted", "path_prob"] = "uniform",
    edges: Literal["once", "per_leaf"] = "once",
    eps: NonNegFloat = 1e-8,
    adv_clip: PosFloat | None = 5.0,
) -> AdvantageResult:
    """BranchGRPO depth-wise advantage, checked against the released code: Fredreic1849/BranchGRPO @
    19fbb9fc92ad1857212f3b664d6e9ff80c8b3804 (`fastvideo/train_branchgrpo_flux.py`:
    `compute_node_rewards_from_leaves`, `compute_hierarchical_advantages_by_depth`,
    `collect_all_transitions`), with denoising steps read as token segments.

    Node values (`branch_node_values`): fusion "uniform" (the code's default) = mean of the node's
    leaf rewards; "prob_weighted" (the code's --tree_prob_weighted) = the children's values weighted
    by softmax over the child edges' log-probs (an edge's log-prob: the sum of its segment's behaviour
    log-probs); "path_prob" is covey's own variant: every leaf below a node weighted by exp(sum of its
    behaviour log-probs after the node), normalised. At each depth d, over the prompt's nodes there:
    A = 0 when one node or std < 1e-6 (unbiased std), else (v - mean) / (std + eps). The tokens of
    segment d (the edge into a depth-(d+1) node) get that node's A. edges "once" (the code: every
    parent->child transition is one training sample): a segment shared by several leaves is trained
    in the first of them only (`sample_mask` [N, T] is 0 on its copies); "per_leaf" (covey's variant)
    trains each leaf's whole path, so a shared token counts once per leaf below it. Segment length
    from `batch.segment_tokens` (set by the `branch` strategy). adv_clip: every node's A is clamped to
    [-adv_clip, adv_clip] (the code's `--adv_clip_max 5.0`, applied to each transition's advantage in
    the loss); None leaves it unclipped (covey's behaviour before round two).
    """
    paths = _paths(batch, "branch_grpo")
    seg = batch.segment_tokens
    if seg is None:
        raise RolloutsError("branch_grpo needs batch.segment_tokens (set by rollout.strategy branch)")
    g = groups_of(batch)
    r = scalar_rewards(batch).tolist()
    gi = g.index.tolist()
    n, t = batch.completion_mask.shape
    lp = (batch.behaviour_logprobs.to(F64) * batch.completion_mask.to(F64)).tolist()
    if fusion == "path_prob":
        sums: dict[tuple, list[float]] = {}  # (group, prefix) -> [sum w*r, sum w]
        for i, p in enumerate(paths):
            for d in range(len(p) + 1):
                w = float(torch.tensor(sum(lp[i][d * seg :])).clamp(-50, 50).exp())
                s = sums.setdefault((gi[i],) + tuple(p[:d]), [0.0, 0.0])
                s[0] += w * r[i]
                s[1] += w
        value = {k: a / b for k, (a, b) in sums.items()}
    else:
        edge = None
        if fusion == "prob_weighted":
            edge = {}
            for i, p in enumerate(paths):
                for d in range(len(p)):
                    edge.setdefault((gi[i],) + tuple(p[: d + 1]), sum(lp[i][d * seg : (d + 1) * seg]))
        value = branch_node_values(paths, gi, r, edge)
    by_depth: dict[tuple[int, int], list[float]] = {}
    for node, v in value.items():
        by_depth.setdefault((node[0], len(node) - 1), []).append(v)
    adv_of: dict[tuple, float] = {}
    for node, v in value.items():
        vs = by_depth[(node[0], len(node) - 1)]
        std = float(torch.tensor(vs, dtype=F64).std()) if len(vs) > 1 else 0.0
        a = 0.0 if len(vs) < 2 or std < 1e-6 else (v - sum(vs) / len(vs)) / (std + eps)
        adv_of[node] = a if adv_clip is None else max(-adv_clip, min(adv_clip, a))
    adv = torch.zeros(n, t, dtype=F64)
    keep = torch.ones(n, t, dtype=torch.float32)
    trained: set[tuple] = set()
    for i, p in enumerate(paths):
        for d in range(len(p)):
            node = (gi[i],) + tuple(p[: d + 1])
            hi = t if d == len(p) - 1 else min(t, (d + 1) * seg)
            adv[i, d * seg : hi] = adv_of[node]
            if edges == "once" and node in trained:
                keep[i, d * seg : hi] = 0.0
            trained.add(node)
    adv = adv * batch.completion_mask.to(F64)
    mask = keep if edges == "once" else None
    return result("branch_grpo", adv, batch, g, sample_mask=mask,
                  metrics={"depths": float(max((len(p) for p in paths), default=0)),
                           "trained_token_frac": float((keep * batch.completion_mask).sum() / batch.completion_mask.sum().clamp(min=1))})  # fmt: skip
