"""Tree-structured advantages for tree rollouts (`Rollouts.tree_path`: each leaf's node ids, root to leaf).

    treepo        TreePO sub-group averaging: a leaf's deviation from every ancestor subtree's mean,
                  averaged ([N]).
    branch_grpo   BranchGRPO reward fusion + depth-wise normalisation: each node's value is the (path-
                  probability weighted) mean of its leaves' rewards, normalised against the other
                  nodes at its depth; a token gets the value of the node whose segment holds it ([N, T]).

Rows are grouped by (group id, path prefix) with a dictionary: trees are small (one per prompt), so
the Python loop over rows is not the cost of a step. Reward arithmetic is float64.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, lengths, result, scalar_rewards, whiten
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
    "treepo", group_relative=True,
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
    settings adv_weight_strategy "average", tree_subgroup_opt 14 (spec §9). root_group=True (default)
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


@register_advantage(
    "branch_grpo", group_relative=True,
    paper="BranchGRPO: Stable and Efficient GRPO with Structured Branching in Diffusion Models",
    arxiv="2509.06040",
)
def branch_grpo(
    batch: Rollouts,
    *,
    fusion: Literal["uniform", "path_prob"] = "uniform",
    eps: NonNegFloat = 1e-6,
) -> AdvantageResult:
    """BranchGRPO depth-wise advantage: node value v = fused mean of its leaves' rewards; at each depth
    d, A = (v - mean_d v) / (std_d v + eps) over the prompt's nodes at depth d; the tokens of segment d
    of a leaf get its depth-d ancestor's A ([N, T]).

    fusion "uniform": plain mean over the node's leaves; "path_prob": leaves weighted by the probability
    of their path below the node, exp(sum of behaviour log-probs after the node) normalised (the
    project page's "path-probability weighting"; exact form UNVERIFIED). Segment length from
    `batch.segment_tokens` (set by the `branch` strategy). Nodes are counted once per
    depth (not once per leaf). A depth with a single node gets A = 0 there.
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
    nodes: dict[tuple, list[float]] = {}  # (group, prefix) -> [sum w*r, sum w]
    for i, p in enumerate(paths):
        for d in range(len(p)):
            w = 1.0
            if fusion == "path_prob":
                w = float(torch.tensor(sum(lp[i][(d + 1) * seg :])).clamp(-50, 50).exp())
            s = nodes.setdefault((gi[i], p[: d + 1]), [0.0, 0.0])
            s[0] += w * r[i]
            s[1] += w
    value = {k: s / w for k, (s, w) in nodes.items()}
    by_depth: dict[tuple[int, int], list[float]] = {}
    for (grp, prefix), v in value.items():
        by_depth.setdefault((grp, len(prefix)), []).append(v)
    stats = {}
    for k, vs in by_depth.items():
        x = torch.tensor(vs, dtype=F64)
        stats[k] = (float(x.mean()), float(x.std()) if len(vs) > 1 else 0.0, len(vs))
    adv = torch.zeros(n, t, dtype=F64)
    for i, p in enumerate(paths):
        for d in range(len(p)):
            mean, std, count = stats[(gi[i], d + 1)]
            a = 0.0 if count < 2 else (value[(gi[i], p[: d + 1])] - mean) / (std + eps)
            hi = t if d == len(p) - 1 else min(t, (d + 1) * seg)
            adv[i, d * seg : hi] = a
    adv = adv * batch.completion_mask.to(F64)
    return result("branch_grpo", adv, batch, g, metrics={"depths": float(max((len(p) for p in paths), default=0))})
