"""GiGPO: Group-in-Group Policy Optimization (episode groups + anchor-state step groups).

Paper: "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978. Status CODE:
checked against verl-agent's `gigpo/core_gigpo.py` (`compute_step_discounted_returns`,
`compute_gigpo_outcome_advantage`, `episode_norm_reward`, `build_step_group`, `step_norm_reward`,
`are_similar`, `to_hashable`; read from a verl-agent-derived copy in the code index whose GiGPO
functions are upstream's; the team's snapshot is the fork xlan156/verl-agent at 8ca3a46).

The code's rows are steps; covey reads the steps of either layout of the `episodes` strategy. The code's
quirks are kept: the episode mean/std is taken over STEPS (an episode of k steps counts k times,
``compute_mean_std_cross_steps=True``), std is unbiased (torch.std), a one-step episode group gets
mean 0 and std 1, a one-member step group gets A_S = 0. covey's one addition: a step whose anchor
is None (the env gave no state) is its own step group (A_S = 0); verl-agent raises on it.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Literal

import torch

from covey.algos.advantages._groups import F64, Fraction, NonNegFloat, groups_of, result
from covey.algos.advantages._steps import discounted_returns, hashable, step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["gigpo", "norm", "step_groups"]


def norm(values: list[float], members: list[int], mode: str, eps: float, singleton_mean_zero: bool) -> dict[int, float]:
    """The code's group normalisation of `values[members]`: mean_norm x - mean, mean_std_norm
    (x - mean) / (std + eps) with the unbiased std; a one-member group uses mean 0 (episode level,
    `singleton_mean_zero`) or its own value (step level), and std 1."""
    x = torch.tensor([values[m] for m in members], dtype=F64)
    if len(members) == 1:
        mean, std = (torch.zeros((), dtype=F64) if singleton_mean_zero else x.mean()), torch.ones((), dtype=F64)
    else:
        mean, std = x.mean(), x.std()
    out = x - mean if mode == "mean_norm" else (x - mean) / (std + eps)
    return dict(zip(members, out.tolist()))


def step_groups(keys: list, groups: list[int], similarity: float | None) -> list[int]:
    """A step-group id per step: steps of the same episode group with equal anchors (exact:
    `to_hashable` equality; `similarity`: greedy clustering, a step joins the first cluster whose first
    anchor has difflib ratio >= the threshold, text anchors only). None anchors are singletons."""
    out, clusters = [0] * len(keys), {}
    next_id = 0
    for s, (key, g) in enumerate(zip(keys, groups)):
        if key is None:
            out[s], next_id = next_id, next_id + 1
            continue
        if similarity is None:
            if (g, key) not in clusters:
                clusters[(g, key)], next_id = next_id, next_id + 1
            out[s] = clusters[(g, key)]
            continue
        if not isinstance(key, str):
            raise RolloutsError("gigpo: similarity grouping needs text anchors")
        reps = clusters.setdefault(g, [])
        for rep, cid in reps:
            if SequenceMatcher(None, key, rep).ratio() >= similarity:
                out[s] = cid
                break
        else:
            reps.append((key, next_id))
            out[s], next_id = next_id, next_id + 1
    return out


@register_advantage("gigpo", group_relative=True, paper="Group-in-Group Policy Optimization for LLM Agent Training (GiGPO, CODE)",
                    arxiv="2505.10978")  # fmt: skip
def gigpo(
    batch: Rollouts,
    *,
    gamma: NonNegFloat = 0.95,
    step_advantage_w: NonNegFloat = 1.0,
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm",
    epsilon: NonNegFloat = 1e-6,
    similarity_thresh: Fraction | None = None,
) -> AdvantageResult:
    """GiGPO: A = A_E + step_advantage_w * A_S per step, on that step's tokens ([N, T]).

    A_E (Eq. 3): the episode's scalar reward normalised within its group of G episodes, statistics
    over steps. A_S (Eq. 7): the step's discounted return R_t = r_t + gamma R_{t+1} (Eq. 5) normalised
    within its step group, the steps of the episode group taken from the same anchor state (Eq. 6).
    similarity_thresh None = exact anchors; a value in (0, 1) = the code's SequenceMatcher clustering.
    """
    st = step_table(batch, "gigpo")
    g = groups_of(batch)
    steps = [(j, t) for j, r in enumerate(st.rewards) for t in range(len(r))]
    ep_val = [st.score[j] for j, _ in steps]
    by_group: dict[int, list[int]] = {}
    for s, (j, _) in enumerate(steps):
        by_group.setdefault(st.group[j], []).append(s)
    a_e: dict[int, float] = {}
    for members in by_group.values():
        a_e.update(norm(ep_val, members, mode, epsilon, singleton_mean_zero=True))
    returns = [discounted_returns(r, gamma) for r in st.rewards]
    ret = [returns[j][t] for j, t in steps]
    keys = [hashable(st.anchors[j][t]) for j, t in steps]
    sg = step_groups(keys, [st.group[j] for j, _ in steps], similarity_thresh)
    by_step_group: dict[int, list[int]] = {}
    for s, k in enumerate(sg):
        by_step_group.setdefault(k, []).append(s)
    a_s: dict[int, float] = {}
    for members in by_step_group.values():
        a_s.update(norm(ret, members, mode, epsilon, singleton_mean_zero=False))
    values = [[0.0] * len(r) for r in st.rewards]
    for s, (j, t) in enumerate(steps):
        values[j][t] = a_e[s] + step_advantage_w * a_s[s]
    sizes = [len(m) for m in by_step_group.values()]
    metrics = {"step_group_size_mean": sum(sizes) / max(len(sizes), 1),
               "step_groups_multi_frac": sum(n > 1 for n in sizes) / max(len(sizes), 1)}  # fmt: skip
    return result("gigpo", to_tokens(batch, st, values), batch, g, metrics=metrics)
