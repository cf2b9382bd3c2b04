"""OBLR-PO's optimal baseline: each row's reward weighted by a proxy of its squared gradient norm.

Paper: "Optimal Baseline and Learning-Rate Policy Optimization" (OBLR-PO), arXiv 2511.23310. Status
PARTIAL (covey's objectives spec, §2.3): the variance-optimal baseline b* = E[||grad log pi(o)||^2 R] /
E[||grad log pi(o)||^2] is the abstract's; the paper's estimator of the gradient norm was not read.
The proxy is verl's "Optimal Token Baseline" (`compute_optimal_token_baseline_advantage`, a framework
implementation of the same principle, not by the OBLR-PO authors): the logit-space squared gradient
norm of log softmax(z)_y, 1 - 2 pi_y + sum_v pi_v^2, accumulated along the path. The learning-rate
half of OBLR-PO (a schedule from the gradient's signal-to-noise ratio) is an optimizer matter, not built.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, groups_of, result, scalar_rewards, token_field
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["oblr_baseline"]


@register_advantage(
    "oblr_baseline", group_relative=True,
    paper="Optimal Baseline and Learning-Rate Policy Optimization (OBLR-PO; PARTIAL: verl OTB gradient-norm proxy)",
    arxiv="2511.23310",
    requires=("sum_p2",),
)  # fmt: skip
def oblr_baseline(
    batch: Rollouts,
    *,
    variant: Literal["sequence", "token"] = "sequence",
    zero_tail: bool = True,
    eps: NonNegFloat = 1e-8,
) -> AdvantageResult:
    """Gradient-weighted group baseline. Shapes: r [N], old log-probs, sum_p2 [N, T] -> A [N] or [N, T].

        w_it = 1 - 2 exp(old_logp_it) + sum_p2_it        sum_p2 = sum_v pi_old(v|s_it)^2 (trainer-filled)
        W_it = cumsum_t(w_it m_it)                       the path's squared-gradient-norm proxy
        "sequence" (b* of the abstract):  w_i = W_{i, L_i};  b_g = sum_i w_i r_i / (sum_i w_i + eps);  A_i = r_i - b_g
        "token" (verl OTB):  B_gt = sum_i r_i W_it m_it / (sum_i W_it m_it + eps);  A_it = r_i - B_gt
            zero_tail: B = 0 at positions where fewer than two rows of the group are still active
            (verl `handle_zero_tail`); a group of one row always gets B = 0 (A = r)
    old_logp: `old_logprobs` when recomputed, else the behaviour log-probs (pi_old on-policy).
    Edge cases: all rewards equal -> A = 0 (on shared positions for "token"); rows with W = 0 carry no
    weight; a group whose weights are all 0 gets b = 0 ("sequence": A = r).
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    old = token_field(batch, "old_logprobs" if batch.old_logprobs is not None else "behaviour_logprobs", "oblr_baseline")
    p2 = token_field(batch, "sum_p2", "oblr_baseline")
    m = batch.completion_mask.to(F64)
    w = (1.0 - 2.0 * old.exp() + p2) * m
    big_w = torch.cumsum(w, -1)
    if variant == "sequence":
        last = (m.sum(-1).long() - 1).clamp(min=0)
        wi = big_w.gather(-1, last[:, None]).squeeze(-1) * (m.sum(-1) > 0)
        b = g.sum(wi * r) / (g.sum(wi) + eps)
        adv = r - b[g.index]
        metrics = {"weight_mean": float(wi.mean()), "baseline_mean": float(b.mean())}
        return result("oblr_baseline", adv, batch, g, metrics=metrics)
    t = m.shape[1]
    wm = big_w * m
    num = torch.zeros(g.num, t, dtype=F64).index_add_(0, g.index, wm * r[:, None])
    den = torch.zeros(g.num, t, dtype=F64).index_add_(0, g.index, wm)
    active = torch.zeros(g.num, t, dtype=F64).index_add_(0, g.index, m)
    base = num / (den + eps)
    alone = active < 2
    drop = alone if zero_tail else alone & (g.size[:, None] < 2)
    base = torch.where(drop, torch.zeros_like(base), base)
    adv = (r[:, None] - base[g.index]) * m
    metrics = {"weight_mean": float(wi_mean(big_w, m)), "zero_tail_frac": float((drop[g.index] * m).sum() / m.sum().clamp(min=1))}
    return result("oblr_baseline", adv, batch, g, metrics=metrics)


def wi_mean(big_w: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Mean of the cumulative weights over unmasked tokens."""
    return (big_w * m).sum() / m.sum().clamp(min=1)
