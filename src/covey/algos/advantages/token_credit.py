"""GTPO: per-token advantages that protect "conflict tokens" shared by positive and negative completions.

This is the one estimator here that returns advantages of shape [N, T]. It reads the sampled token
ids, the completion mask, the group ids and (for its entropy filter) ``batch.entropies``. The loss
itself is whatever surrogate/aggregation the config picks; see `gtpo` for the combination that
reproduces the released loss.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from covey.algos.advantages._groups import (
    F64,
    NonNegFloat,
    group_normalise,
    groups_of,
    result,
    scalar_rewards,
    token_field,
)
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["gtpo"]


def _prefix_conflicts(ids: Tensor, mask: Tensor, gidx: Tensor, pos: Tensor, neg: Tensor) -> Tensor:
    """[N, T] bool: token (t, id) occurs at position t in a positive and a negative row of the same
    group, and every earlier position of the row is such a conflict too (the initial run)."""
    n, t = ids.shape
    active = (pos | neg)[:, None] & mask  # [N, T] tokens that take part in the comparison
    rows, cols = torch.nonzero(active, as_tuple=True)
    raw = torch.zeros(n, t, dtype=torch.bool, device=ids.device)
    if rows.numel():
        tok = ids[rows, cols]
        tok = tok - tok.min()  # non-negative token codes
        n_groups, vocab = int(gidx.max()) + 1, int(tok.max()) + 1
        if n_groups * t * vocab < 2**62:  # one int64 key per (group, position, token): fast 1-D unique
            _, inv = torch.unique((gidx[rows] * t + cols) * vocab + tok, return_inverse=True)
        else:
            _, inv = torch.unique(torch.stack([gidx[rows], cols, tok], dim=1), dim=0, return_inverse=True)
        n_keys = int(inv.max()) + 1
        zeros = torch.zeros(n_keys, dtype=torch.long, device=ids.device)
        has_pos = zeros.scatter_reduce(0, inv, pos[rows].long(), reduce="amax")  # [keys]
        has_neg = zeros.scatter_reduce(0, inv, neg[rows].long(), reduce="amax")
        raw[rows, cols] = (has_pos[inv] > 0) & (has_neg[inv] > 0)
    return torch.cumprod(raw.long(), dim=1).bool() & active


def _conflict_masks(ids: Tensor, mask: Tensor, gidx: Tensor, pos: Tensor, neg: Tensor) -> tuple[Tensor, Tensor]:
    """Forward and backward conflict masks, both [N, T] bool in the rows' own coordinates.

    ids [N, T] long, mask [N, T] bool, gidx [N] dense group index, pos / neg [N] bool (A > 0 / A < 0).
    Backward = the same test with every row right-aligned at its last unmasked token (a suffix run).
    """
    n, t = ids.shape
    fwd = _prefix_conflicts(ids, mask, gidx, pos, neg)
    ar = torch.arange(t, device=ids.device)
    last = torch.where(mask, ar[None, :], torch.full_like(ids, -1)).amax(dim=1)  # [N] last unmasked index
    src = last[:, None] - ar[None, :]  # [N, T] reversed slot u reads original position last - u
    ok = src >= 0
    srcc = src.clamp(min=0)
    rev_ids = ids.gather(1, srcc)
    rev_mask = mask.gather(1, srcc) & ok
    rev = _prefix_conflicts(rev_ids, rev_mask, gidx, pos, neg)
    bwd = torch.zeros_like(rev)
    r_idx, u_idx = torch.nonzero(rev, as_tuple=True)
    bwd[r_idx, src[r_idx, u_idx]] = True
    return fwd, bwd


@register_advantage(
    "gtpo", group_relative=True,
    paper="GTPO: Trajectory-Based Policy Optimization in Large Language Models",
    arxiv="2508.03772",
    requires=("entropies",),
)
def gtpo(
    batch: Rollouts,
    *,
    conflict_weight: NonNegFloat = 2.0,
    entropy_filter: bool = True,
    ent_threshold: NonNegFloat = 0.7,
    ent_scale: NonNegFloat = 0.1,
    scale: Literal["group", "none"] = "group",
    eps: NonNegFloat = 1e-4,
) -> AdvantageResult:
    """GTPO per-token advantage. Shapes: r [N], ids / mask / entropies [N, T] -> A [N, T].

        A_i      = group advantage (scale "group": (r - mean)/(std + eps); "none": r - mean)
        H_i      = (1/L_i) sum_t mask * entropy_it                  (mean entropy of the completion)
        A'_i     = A_i - ent_scale * H_i  if H_i <= ent_threshold, else 0   (entropy filter)
        conflict: token id v at position t is a conflict if v sits at t in some A>0 and some A<0 row
                  of the same group, counted only along the initial run from t = 0 (forward) and,
                  with rows right-aligned at their last token, along the final run (backward)
        delta_it = d_fwd * d_bwd,  d = 1 off-conflict, conflict_weight on conflicts of A>0 rows,
                   0 on conflicts of A<0 rows (their negative update is skipped)
        n_i      = #tokens that are forward or backward conflicts (min 1); rows with A = 0: delta =
                   mask, n = 1
        A_it     = A'_i * delta_it / n_i

    Source: winstonsmith1897/GTPO `gtpo/gtpo_training.py` (`build_conflict_mask`, `gtpo_compute_loss`,
    `UnslothEfficientGTPO.forward`; ENT_THRESHOLD=0.7, ENT_SCALE=0.1, W_RAW=2.0). Details:
      * pos/neg flags come from A before the entropy shaping, as in the reference; a row with A = 0
        that passes the filter gets A' = -ent_scale * H_i on every token (also as in the reference);
      * a token that is a conflict in both directions of a positive row gets weight 4;
      * the released loss per completion is [sum_t -(A'_i delta_it) ratio_it / L_i] / n_i, summed over
        completions; with surrogate "reinforce" (or PPO-clip on-policy) and aggregation
        "seq-mean-token-mean" this [N, T] advantage gives exactly that loss divided by N;
      * scale: the paper uses GRPO group normalisation; the stored version of the released
        trainer's reward block has the std division commented out, which is scale="none";
      * eps = 1e-4 because the reference trainer is TRL-based; entropies are the sampling
        distribution's (``batch.entropies``), equal to the reference's new-policy entropy on-policy;
      * masked tokens inside a row break a conflict run (the reference has contiguous masks).
    """
    g = groups_of(batch)
    a0 = group_normalise(scalar_rewards(batch), g, eps=eps, scale=scale, singleton="zero")
    m = batch.completion_mask > 0
    mf = m.to(F64)
    n_tok = mf.sum(-1)
    pos, neg = a0 > 0, a0 < 0
    fwd, bwd = _conflict_masks(batch.completion_ids, m, g.index, pos, neg)
    w_pos = torch.full_like(mf, conflict_weight)
    d_fwd = torch.where(fwd, torch.where(pos[:, None], w_pos, torch.zeros_like(mf)), torch.ones_like(mf))
    d_bwd = torch.where(bwd, torch.where(pos[:, None], w_pos, torch.zeros_like(mf)), torch.ones_like(mf))
    delta = d_fwd * d_bwd * mf
    n_conf = ((fwd | bwd) & m).sum(-1).clamp(min=1).to(F64)
    active = pos | neg
    n_conf = torch.where(active, n_conf, torch.ones_like(n_conf))
    shaped = a0
    if entropy_filter:
        ent = token_field(batch, "entropies", "gtpo")
        h = (ent * mf).sum(-1) / n_tok.clamp(min=1)
        shaped = torch.where(h <= ent_threshold, a0 - ent_scale * h, torch.zeros_like(a0))
        filtered = float((h > ent_threshold).to(F64).mean())
    else:
        filtered = 0.0
    adv = shaped[:, None] * delta / n_conf[:, None]  # [N, T]
    metrics = {
        "conflict_token_frac": float(((fwd | bwd) & m).sum() / mf.sum().clamp(min=1)),
        "entropy_filtered_frac": filtered,
    }
    return result("gtpo", adv, batch, g, metrics=metrics)
