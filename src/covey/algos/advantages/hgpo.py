"""HGPO: Hierarchy-of-Groups Policy Optimization (steps grouped by shared history of each depth k).

Paper: arXiv 2602.22817 (He, Feng, Wei, Cheng, Feng, An; ICLR 2026). Checked against the authors' recipe
`recipe/hgpo` for verl-agent (`core_hgpo.py::hgpo_advantage_estimate`, `trajectory_advantages`,
`config/hgpo_trainer.yaml`, `run_qwen2.5_1.5b_alfworld_train.sh`), read in the copy at
zzj1111/alfworldauto @ 51c1a039c38f1af54b09c05b81b76ce52d72c383 (its README is the authors'; upstream
langfengQ/verl-agent is not in the code store). The recipe weights each group by L^alpha with L = k + 1
("L=k+1 used for weight") and trains with mode mean_std_norm, alpha 1, base_group false, gamma 0.95.
Similarity clustering (SequenceMatcher / LLM, in a later third-party port) is not built.

"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, NonNegInt, groups_of, result
from covey.algos.advantages._steps import discounted_returns, hashable, step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["aggregate", "hgpo"]


def aggregate(items: list[tuple[int, float]], alpha: float, epsilon: float) -> float:
    """The recipe's `aggregate_items`: drop zero advantages, weight the rest by (k + 1) ** alpha,
    normalised by (sum + epsilon); 0 when nothing is left."""
    kept = [(k, a) for k, a in items if a != 0]
    if not kept:
        return 0.0
    w = torch.tensor([k + 1.0 for k, _ in kept], dtype=F64) ** alpha
    w = w / (w.sum() + epsilon)
    return float((w * torch.tensor([a for _, a in kept], dtype=F64)).sum())


@register_advantage("hgpo", group_relative=True, paper="Hierarchy-of-Groups Policy Optimization (HGPO, CODE-3P)", arxiv="2602.22817")
def hgpo(
    batch: Rollouts,
    *,
    history_length: NonNegInt = 2,
    alpha: float = 1.0,
    base_group: bool = False,
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm",
    gamma: NonNegFloat = 1.0,
    epsilon: NonNegFloat = 1e-6,
    base_std: Literal["unbiased", "population"] = "unbiased",
) -> AdvantageResult:
    """HGPO step advantage on each step's tokens ([N, T]).

    Within an episode group, step t of an episode joins, for each k = 1 .. history_length + 1 with
    k <= t + 1, the group keyed (k, anchors o_{t-k+1} .. o_t) (k = 1 is GiGPO's anchor group; repeats
    within one episode count). Each group of >= 2 steps normalises the discounted returns R (mean_norm:
    R - mean; mean_std_norm: (R - mean) / (population std + epsilon)). A step's advantage aggregates
    its (k, A_k) items (`aggregate`, weights (k + 1) ** alpha); base_group adds (0, the episode's
    reward normalised over the group's steps, one step -> mean 0 std 1) first. The base's std is the
    recipe's `torch.std` (unbiased, `base_std="unbiased"`); "population" is covey's earlier choice (and
    a third-party port's). gamma 1.0 is the function's default; the recipe's scripts pass 0.95.
    """
    st = step_table(batch, "hgpo")
    g = groups_of(batch)
    returns = [discounted_returns(r, gamma) for r in st.rewards]
    clusters: dict[tuple, list[tuple[int, int]]] = {}
    for j, r in enumerate(st.rewards):
        hist = [hashable(a) for a in st.anchors[j]]
        for t in range(len(r)):
            for k in range(1, min(history_length + 1, t + 1) + 1):
                clusters.setdefault((st.group[j], k, tuple(hist[t - k + 1 : t + 1])), []).append((j, t))
    items: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for (_, k, _), members in clusters.items():
        if len(members) <= 1:
            continue
        x = torch.tensor([returns[j][t] for j, t in members], dtype=F64)
        a = x - x.mean() if mode == "mean_norm" else (x - x.mean()) / (x.std(unbiased=False) + epsilon)
        for m, v in zip(members, a.tolist()):
            items.setdefault(m, []).append((k, v))
    base = _base(st.score, st.group, [len(r) for r in st.rewards], mode, epsilon, base_std == "unbiased") if base_group else None
    values = []
    for j, r in enumerate(st.rewards):
        row = []
        for t in range(len(r)):
            its = ([(0, base[j])] if base is not None else []) + items.get((j, t), [])
            row.append(aggregate(its, alpha, epsilon))
        values.append(row)
    multi = float(sum(len(m) > 1 for m in clusters.values()))
    return result("hgpo", to_tokens(batch, st, values), batch, g, metrics={"groups_multi": multi})


def _base(score: list[float], group: list[int], turns: list[int], mode: str, epsilon: float, unbiased: bool) -> list[float]:
    """The recipe's `trajectory_advantages` (statistics over the group's steps, compute_mean_std_cross_steps)."""
    out = [0.0] * len(score)
    for gid in set(group):
        rows = [i for i in range(len(score)) if group[i] == gid]
        x = torch.tensor([score[i] for i in rows for _ in range(turns[i])], dtype=F64)
        mean, std = (x.mean(), x.std(unbiased=unbiased)) if x.numel() > 1 else (torch.zeros((), dtype=F64), torch.ones((), dtype=F64))
        for i in rows:
            c = score[i] - float(mean)
            out[i] = c if mode == "mean_norm" else c / (float(std) + epsilon)
    return out
