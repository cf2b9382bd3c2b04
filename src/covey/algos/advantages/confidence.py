"""Likelihood-aware modulations of the GRPO advantage: ACE, XRPO (novelty sharpening), ARM (ProGRPO).

Each starts from the GRPO group-normalised advantage (verl convention: unbiased std, eps 1e-6) and
adjusts it with a per-row confidence built from token log-probabilities already in the batch:
``behaviour_logprobs`` (the sampling policy, pi_theta_old on-policy); ACE also reads
``ref_logprobs``, which the trainer fills because ACE declares it in ``requires``. No formula here
could be checked against released code: every function marks its UNVERIFIED choices, which are
options where the candidates differ. Confidences only scale the advantage (no gradient).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from covey.algos.advantages._groups import (
    F64,
    Fraction,
    NonNegFloat,
    group_normalise,
    groups_of,
    result,
    scalar_rewards,
    seq_mean_logprob,
    token_field,
)
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["ace", "arm", "xrpo"]


@register_advantage(
    "ace", group_relative=True,
    paper="Overconfident Errors Need Stronger Correction: Asymmetric Confidence Penalties for Reinforcement Learning",
    arxiv="2602.21420",
    requires=("ref_logprobs",),
)
def ace(
    batch: Rollouts,
    *,
    alpha: NonNegFloat = 1.0,
    form: Literal["multiplicative", "additive"] = "multiplicative",
    confidence: Literal["sum", "mean"] = "sum",
    eps: NonNegFloat = 1e-6,
) -> AdvantageResult:
    """ACE: penalise confident errors harder. Shapes: r [N], logp / ref_logp [N, T] -> A [N].

        c_i = sum_t mask * (logp_it - ref_logp_it)     (confidence "sum": log pi(y|x) - log pi_ref(y|x))
            or the same divided by L_i                  (confidence "mean")
        A_i = GRPO advantage
        for A_i < 0:  A_i * (1 + alpha * softplus(c_i))   form "multiplicative"
                      A_i - alpha * softplus(c_i)          form "additive"

    VERIFIED (paper abstract): c_i is the sequence log-ratio to the reference model; only negative
    advantages (incorrect rollouts) are modulated, through softplus. UNVERIFIED: which of the two
    forms the paper uses (a secondary summary says it "scales negative advantages", i.e.
    multiplicative, the default), whether c is length-normalised, and alpha (1.0 is covey's choice).
    Gating is on A_i < 0, so all-wrong groups (A = 0) stay 0 under both forms. ``logp`` is
    ``behaviour_logprobs`` (pi_theta at rollout time). Needs ``batch.ref_logprobs``. Empty rows get c = 0.
    """
    g = groups_of(batch)
    a0 = group_normalise(scalar_rewards(batch), g, eps=eps, scale="group", singleton="zero")
    lp = token_field(batch, "behaviour_logprobs", "ace")
    ref = token_field(batch, "ref_logprobs", "ace")
    m = batch.completion_mask.to(F64)
    c = ((lp - ref) * m).sum(-1)
    if confidence == "mean":
        c = c / m.sum(-1).clamp(min=1)
    sp = F.softplus(c)
    neg = a0 < 0
    shaped = a0 * (1.0 + alpha * sp) if form == "multiplicative" else a0 - alpha * sp
    adv = torch.where(neg, shaped, a0)
    metrics = {"confidence_mean_neg": float(c[neg].mean()) if neg.any() else 0.0}
    return result("ace", adv, batch, g, metrics=metrics)


@register_advantage(
    "xrpo", group_relative=True,
    paper="XRPO: Pushing the limits of GRPO with Targeted Exploration and Exploitation",
    arxiv="2510.06672",
)
def xrpo(
    batch: Rollouts,
    *,
    novelty_lambda: NonNegFloat = 2.5,
    kappa: NonNegFloat = 0.5,
    s_bar: Literal["all", "correct"] = "all",
    eps: NonNegFloat = 1e-6,
) -> AdvantageResult:
    """XRPO novelty-aware advantage sharpening. Shapes: r [N], logp [N, T] -> A [N].

        s_i   = (1/L_i) sum_t logp_it                  length-normalised sequence log-likelihood
        eta_i = exp(s_i - s_bar_g)                      s_bar_g = group mean of s (over "all" rows or
                                                        over the "correct" rows, A > 0)
        A_i  += min(max(novelty_lambda * (1 - eta_i), 0), kappa * A_i)     only where A_i > 0

    Low-likelihood correct answers (eta < 1) get a bonus capped at kappa * A_i. Sources: secondary
    only (PARTIAL): lambda = 2.5 and kappa = 0.5 are the reported defaults;
    gating on correct responses follows the paper's description (a third-party re-implementation
    applies the bonus to every row with cap kappa |A|); s_bar over all vs correct rows is UNVERIFIED.
    XRPO's rollout allocator and in-context seeding are sampling logic, not part of this estimator.
    Empty rows are left out of s_bar and get no bonus.
    """
    g = groups_of(batch)
    a0 = group_normalise(scalar_rewards(batch), g, eps=eps, scale="group", singleton="zero")
    s, n_tok = seq_mean_logprob(batch, "xrpo")
    member = (n_tok > 0) & ((a0 > 0) if s_bar == "correct" else torch.ones_like(a0, dtype=torch.bool))
    cnt = g.sum(member.to(F64))
    s_ref = g.sum(torch.where(member, s, torch.zeros_like(s))) / cnt.clamp(min=1)  # [B]
    eta = torch.exp(s - s_ref[g.index])
    bonus = torch.minimum((novelty_lambda * (1.0 - eta)).clamp(min=0), kappa * a0)
    gate = (a0 > 0) & (n_tok > 0) & (cnt[g.index] > 0)
    adv = torch.where(gate, a0 + bonus, a0)
    metrics = {"bonus_mean": float(bonus[gate].mean()) if gate.any() else 0.0}
    return result("xrpo", adv, batch, g, metrics=metrics)


def _low_prob_confidence(batch: Rollouts, low_frac: float) -> tuple[torch.Tensor, torch.Tensor]:
    """c(o|q) = mean of the ceil(low_frac * L) lowest token log-probs of each row ([N]); and L ([N])."""
    lp = token_field(batch, "behaviour_logprobs", "arm")
    m = batch.completion_mask > 0
    n_tok = m.sum(-1)
    ranked, _ = torch.sort(torch.where(m, lp, torch.full_like(lp, torch.inf)), dim=-1)  # lowest first
    k = torch.clamp(torch.ceil(low_frac * n_tok.to(F64)).long(), min=1)  # [N]
    k = torch.minimum(k, n_tok.clamp(min=1))
    csum = torch.cumsum(torch.where(torch.isinf(ranked), torch.zeros_like(ranked), ranked), dim=-1)
    if csum.shape[-1] == 0:
        return torch.zeros(len(batch), dtype=F64, device=lp.device), n_tok.to(F64)
    conf = csum.gather(-1, (k - 1)[:, None]).squeeze(-1) / k.to(F64)
    return torch.where(n_tok > 0, conf, torch.zeros_like(conf)), n_tok.to(F64)


@register_advantage(
    "arm", group_relative=True,
    paper="Back to Basics: Revisiting Exploration in Reinforcement Learning for LLM Reasoning via Generative Probabilities",
    arxiv="2602.05281",
)
def arm(
    batch: Rollouts,
    *,
    alpha: NonNegFloat = 0.1,
    low_frac: Fraction = 0.2,
    apply_to: Literal["all", "correct"] = "all",
    eps: NonNegFloat = 1e-6,
) -> AdvantageResult:
    """ARM (ProGRPO advantage re-weighting). Shapes: r [N], logp [N, T] -> A [N].

        A_i   = GRPO advantage
        A~_i  = A_i                                   if the group has no correct row (max r <= 0)
        A~_i  = A_i + alpha * (c(q) - c(o_i|q))       otherwise

    VERIFIED (paper abstract + review): the piecewise form; c(q) comes from prompt perplexity and
    c(o|q) is an answer confidence normalised over roughly the 20 % lowest-probability tokens.
    UNVERIFIED candidates implemented here (documented choices):
      * c(o_i|q) = mean of the ceil(low_frac * L_i) lowest token log-probs of row i (log-probs, not
        probabilities), from ``behaviour_logprobs``;
      * c(q) needs prompt log-probs, which `Rollouts` does not carry: covey uses the group mean of
        c(o|q) over the non-empty rows as the reference, so over-confident answers (c(o) above their
        group's mean) get a smaller advantage and under-confident correct ones a larger one;
      * alpha = 0.1 and whether the term applies to all rows or only correct ones (``apply_to``,
        correct = A_i > 0) are covey's choices.
    Empty rows get no adjustment and are left out of c(q).
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    a0 = group_normalise(r, g, eps=eps, scale="group", singleton="zero")
    conf, n_tok = _low_prob_confidence(batch, low_frac)
    has = (n_tok > 0).to(F64)
    c_q = g.sum(conf * has) / g.sum(has).clamp(min=1)  # [B]
    delta = alpha * (c_q[g.index] - conf)
    gate = (g.amax(r)[g.index] > 0) & (n_tok > 0)
    if apply_to == "correct":
        gate = gate & (a0 > 0)
    adv = torch.where(gate, a0 + delta, a0)
    metrics = {"shift_abs_mean": float(delta[gate].abs().mean()) if gate.any() else 0.0}
    return result("arm", adv, batch, g, metrics=metrics)

