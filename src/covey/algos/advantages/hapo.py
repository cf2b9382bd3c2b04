"""HAPO's token-level group average: group statistics of the outcome reward weighted by response length.

Paper: "Heterogeneous Adaptive Policy Optimization: Tailoring Optimization to Every Token's Nature",
arXiv 2509.16591. Status VERIFIED-CODE (starriver030515/HAPO `7671dde3e268`,
`compute_hapo_outcome_advantage`; re-read in the repository's
README code listing). Only the advantage part of HAPO: its adaptive sampling temperature (an engine
rule), differential advantage redistribution and asymmetric adaptive clipping (a surrogate on the
current-policy entropy) are not here.
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, PosFloat, group_normalise, groups_of, lengths, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["hapo"]


@register_advantage(
    "hapo", group_relative=True,
    paper="Heterogeneous Adaptive Policy Optimization: Tailoring Optimization to Every Token's Nature "
          "(VERIFIED-CODE; token-level group average only)",
    arxiv="2509.16591",
)  # fmt: skip
def hapo(
    batch: Rollouts, *, eps: NonNegFloat = 1e-6, fallback_abs: PosFloat = 5.0, norm_by_std: bool = True
) -> AdvantageResult:
    """Token-level group average with a GRPO fallback. Shapes: r [N], L [N] -> A [N].

        mu_g = sum_i L_i r_i / sum_i L_i                       (mean over the group's tokens)
        sd_g = sqrt( sum_i L_i (r_i - mu_g)^2 / sum_i L_i )    (population std over the group's tokens)
        A_i  = (r_i - mu_g) / (sd_g + eps)                     (norm_by_std=False: r_i - mu_g)
        if any |A_i| >= fallback_abs in g:  A_g := grpo(r_g)  (unbiased std, same eps; `grpo` scale "none"
                                                               when norm_by_std=False)
    Long responses weigh more in the baseline, so in a group with one short correct answer among long
    wrong ones the correct answer gets a larger advantage than GRPO gives; the fallback keeps rare
    extreme values (a lone very short row) at GRPO's size. Defaults: eps 1e-6, threshold 5 (the code's).
    Edge cases: G = 1 or all rewards equal -> 0; rows with L = 0 have no weight in mu_g / sd_g (their
    own A is computed but carries no gradient); a group whose rows are all empty gets 0 (the reference
    would produce NaN).
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    w = lengths(batch)
    tokens = g.sum(w)  # [B]
    mu = g.sum(w * r) / tokens.clamp(min=1)
    dev = r - mu[g.index]
    sd = (g.sum(w * dev**2) / tokens.clamp(min=1)).sqrt()
    adv = dev / (sd[g.index] + eps) if norm_by_std else dev
    adv = torch.where(tokens[g.index] > 0, adv, torch.zeros_like(adv))
    extreme = g.sum((adv.abs() >= fallback_abs).to(F64)) > 0  # [B]
    grpo = group_normalise(r, g, eps=eps, scale="group" if norm_by_std else "none", singleton="zero")
    adv = torch.where(extreme[g.index], grpo, adv)
    return result("hapo", adv, batch, g, metrics={"fallback_groups": float(extreme.to(F64).mean())})
