"""Pair builders (registry `PAIRS`, config `preference.pairs: {name, ...}`): which rows of a scored
step batch a preference loss compares.

A builder is ``fn(batch, generator, **params) -> Pairs`` and reads the batch's scalar rewards
(every reward function, weighted), `group` and, for `xpo`, its items. Rows come from the rollout
strategy: online, the G completions a prompt's group drew; offline, the `offline_pairs` strategy's chosen row (reward 1) and rejected row
(reward 0) of each dataset pair. Pairs never cross groups, so a group is the unit the preference
learner's micro-batches keep whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from covey.preference.losses import rso_accept
from covey.registry import Registry
from covey.rollouts import Rollouts

__all__ = ["PAIRS", "Pairs"]


@dataclass
class Pairs:
    chosen: list[int]
    rejected: list[int]
    preferred: list[bool]  # per row: a set loss's preferred (equivalent) rows
    metrics: dict[str, float] = field(default_factory=dict)


def _check(out, args) -> str | None:
    return None if isinstance(out, Pairs) else "must return covey.preference.pairs.Pairs"


PAIRS = Registry("preference pair builder", context=("batch", "generator"),
                 signature="fn(batch: Rollouts, generator, **params) -> Pairs", returns=_check,
                 returns_doc="Pairs", defaults_required=True)  # fmt: skip


def _groups(group: Tensor) -> list[list[int]]:
    """Row indices of each group, groups in order of first appearance."""
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group.tolist()):
        out.setdefault(g, []).append(i)
    return list(out.values())


def _summary(chosen: list[int], groups: int, used: int) -> dict[str, float]:
    return {"pairs": float(len(chosen)), "groups_without_pair_frac": (groups - used) / max(groups, 1)}


@PAIRS.register("best_worst")
def best_worst(batch: Rollouts, generator: torch.Generator) -> Pairs:
    """One pair per group: the highest-reward row against the lowest.

    The first of equals on either side, in row order; a group whose rewards are all equal gives no pair (no preference). Online DPO
    from groups, and the offline chosen/rejected rows. Covey's rule (TRL's online DPO draws two
    completions and asks a judge; with a scalar reward its choice is the same for G = 2)."""
    chosen, rejected, used = [], [], 0
    groups = _groups(batch.group)
    r = batch.scalar_rewards().tolist()
    for rows in groups:
        hi = max(rows, key=lambda i: (r[i], -i))
        lo = min(rows, key=lambda i: (r[i], i))
        if r[hi] > r[lo]:
            chosen.append(hi)
            rejected.append(lo)
            used += 1
    return Pairs(chosen, rejected, [False] * len(r), _summary(chosen, len(groups), used))


@PAIRS.register("all_pairs")
def all_pairs(batch: Rollouts, generator: torch.Generator) -> Pairs:
    """Every pair (i, j) of a group with r_i > r_j, i chosen (ties give none)."""
    chosen, rejected, used = [], [], 0
    groups = _groups(batch.group)
    r = batch.scalar_rewards().tolist()
    for rows in groups:
        before = len(chosen)
        for i in rows:
            for j in rows:
                if r[i] > r[j]:
                    chosen.append(i)
                    rejected.append(j)
        used += len(chosen) > before
    return Pairs(chosen, rejected, [False] * len(r), _summary(chosen, len(groups), used))


@PAIRS.register("rso", paper="Statistical Rejection Sampling Improves Preference Optimization", arxiv="2309.06657")
def rso(batch: Rollouts, generator: torch.Generator, *, beta_rs: float = 0.5, accept: int = 2) -> Pairs:
    """RSO: rows rejection-sampled toward pi* ~ pi exp(r / beta_rs), paired in acceptance order.

    Per group, `accept` rows rejection-sampled toward pi* ~ pi exp(r / beta_rs)
    (`covey.preference.losses.rso_accept`, the paper's Algorithm 1; uniforms from the step's seeded
    generator), then paired in acceptance order (1st with 2nd, 3rd with 4th, ...), the higher reward
    chosen; equal rewards give no pair (the pairing is covey's; the paper labels pairs of accepted
    samples with its pairwise reward model). The paper samples 64 candidates, keeps 8 and labels pairs with a pairwise reward model; here
    the candidates are the group and the label is the scalar reward. Train with `dpo` loss_type hinge
    (RSO / SLiC) or sigmoid."""
    if beta_rs <= 0:
        raise ValueError(f"preference.pairs rso: beta_rs must be > 0, got {beta_rs}")
    if accept < 2:
        raise ValueError(f"preference.pairs rso: accept must be >= 2 (a pair), got {accept}")
    chosen, rejected, used, kept = [], [], 0, 0
    groups = _groups(batch.group)
    r = batch.scalar_rewards().tolist()

    def uniform() -> float:
        return float(torch.rand((), generator=generator))

    for rows in groups:
        picked = [rows[k] for k in rso_accept([r[i] for i in rows], beta_rs, accept, uniform)]
        kept += len(picked)
        before = len(chosen)
        for a, b in zip(picked[0::2], picked[1::2]):
            if r[a] != r[b]:
                chosen.append(a if r[a] > r[b] else b)
                rejected.append(b if r[a] > r[b] else a)
        used += len(chosen) > before
    m = _summary(chosen, len(groups), used)
    m["accepted_frac"] = kept / max(len(r), 1)
    return Pairs(chosen, rejected, [False] * len(r), m)


@PAIRS.register("sets")
def sets(batch: Rollouts, generator: torch.Generator, *, threshold: float = 1.0) -> Pairs:
    """Preferred rows for the set losses (`gepo_provisional`): reward >= threshold.

    A row is preferred (in E, e.g. equivalent to the source program) when its reward is >= `threshold`; the others are I. No pairs."""
    preferred = [v >= threshold for v in batch.scalar_rewards().tolist()]
    groups = _groups(batch.group)
    used = sum(any(preferred[i] for i in rows) and not all(preferred[i] for i in rows) for rows in groups)
    return Pairs([], [], preferred, {"groups_without_pair_frac": (len(groups) - used) / max(len(groups), 1),
                                     "preferred_frac": sum(preferred) / max(len(preferred), 1)})  # fmt: skip


@PAIRS.register("xpo", paper="Exploratory Preference Optimization", arxiv="2405.21046")
def xpo(batch: Rollouts, generator: torch.Generator) -> Pairs:
    """XPO's pairs: each policy sample against its group's reference sample.

    In each group, every policy sample against the group's first reference sample (rows the `reference_pairs` strategy marks ``reference_sample``); the higher reward is chosen, a tie
    chooses the policy sample (TRL `XPOTrainer`: ``chosen = y if score(y) >= score(y~)``)."""
    ref = explore_rows(batch)
    chosen, rejected, used = [], [], 0
    groups = _groups(batch.group)
    r = batch.scalar_rewards().tolist()
    for rows in groups:
        refs = [i for i in rows if ref[i]]
        if not refs:
            continue
        y_ref = refs[0]
        for i in rows:
            if not ref[i]:
                chosen.append(i if r[i] >= r[y_ref] else y_ref)
                rejected.append(y_ref if r[i] >= r[y_ref] else i)
        used += 1
    return Pairs(chosen, rejected, [False] * len(r), _summary(chosen, len(groups), used))


def explore_rows(batch: Rollouts) -> list[bool]:
    """Per row: sampled from the reference (`reference_pairs` marks its item copy ``reference_sample``)."""
    return [bool(it.get("reference_sample", False)) for it in (batch.items or [{}] * len(batch))]
