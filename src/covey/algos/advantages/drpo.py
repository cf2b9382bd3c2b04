"""DRPO as an advantage: the per-row weights whose REINFORCE gradient equals DRPO's discriminative loss.

DRPO (Decoupled Reward Policy Optimization) is written as a loss over length-normalised sequence
log-likelihoods, not as an advantage. Its gradient at theta = theta_old is nevertheless a weighted
sum of per-sequence score gradients, so it fits covey's advantage axis exactly (derivation in `drpo`).
The KL trust-region term of the released loss is a KL/penalty concern and is not part of this.
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import (
    F64,
    NonNegInt,
    PosFloat,
    groups_of,
    result,
    scalar_rewards,
    seq_mean_logprob,
)
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["binary_masks", "drpo"]


def _group_softmax(z: torch.Tensor, member: torch.Tensor, gidx: torch.Tensor, num: int) -> torch.Tensor:
    """[N] softmax of z over the ``member`` rows of each group (0 elsewhere)."""
    neg_inf = torch.full_like(z, -torch.inf)
    zmax = torch.full((num,), -torch.inf, dtype=z.dtype, device=z.device)
    zmax = zmax.scatter_reduce(0, gidx, torch.where(member, z, neg_inf), reduce="amax")  # [B]
    e = torch.where(member, torch.exp(z - zmax[gidx].nan_to_num(neginf=0.0)), torch.zeros_like(z))
    tot = torch.zeros(num, dtype=z.dtype, device=z.device).index_add_(0, gidx, e)
    return e / tot[gidx].clamp(min=torch.finfo(z.dtype).tiny)


def binary_masks(gidx: torch.Tensor, num: int, r: torch.Tensor, nonempty: torch.Tensor):
    """DRPO/DisCO's sets as [N] bool masks (pos, neg) and [B] bool `valid`: rows with reward 1 / 0 and
    at least one token, in groups that hold both (the released `valid_mask`)."""
    pos = (r == 1) & nonempty
    neg = (r == 0) & nonempty
    size = lambda m: torch.zeros(num, dtype=F64, device=r.device).index_add_(0, gidx, m.to(F64))  # noqa: E731
    valid = (size(pos) > 0) & (size(neg) > 0)  # [B]
    return pos & valid[gidx], neg & valid[gidx], valid


def binary_sets(batch: Rollouts, who: str):
    """DRPO/DisCO's sets on a batch: (groups, r, score, n_tok, pos, neg, metrics) (see `binary_masks`);
    score is each row's mean behaviour log-prob."""
    g = groups_of(batch)
    r = scalar_rewards(batch)
    score, n_tok = seq_mean_logprob(batch, who)
    pos, neg, valid = binary_masks(g.index, g.num, r, n_tok > 0)
    metrics = {"valid_groups": float(valid.to(F64).mean()), "non_binary_frac": float(((r != 0) & (r != 1)).to(F64).mean())}
    return g, r, score, n_tok, pos, neg, metrics


@register_advantage(
    "drpo", group_relative=True,
    paper="DRPO: Efficient Reasoning via Decoupled Reward Policy Optimization",
    arxiv="2510.04474",
)
def drpo(
    batch: Rollouts,
    *,
    tau: PosFloat = 10.0,
    lam: PosFloat = 0.1,
    max_len: NonNegInt = 0,
    length_weight: bool = True,
) -> AdvantageResult:
    """DRPO gradient-equivalent advantage. Shapes: r [N] (binary), logp / mask [N, T] -> A [N].

    Released loss (Optimization-AI/DRPO `compute_policy_loss_drpo`), per group g with at least one
    correct (r == 1) and one incorrect (r == 0) row, Q = number of groups in the batch:
        score_i = (1/L_i) sum_t logp_it
        w_i     = exp((1 - L_i / T_max) / lam),   P_i = w_i / sum_{j in pos} w_j
        J_g     = sum_{i in pos} P_i (score_i - tau * log sum_{k in neg} exp(score_k / tau))
        loss    = -(1/Q) sum_g J_g   (+ KL trust-region term, not here)
    Its gradient is -(1/Q) sum_g [sum_pos P_i grad score_i - sum_neg softmax_k(score/tau) grad score_k].
    With surrogate "reinforce" (or PPO-clip on-policy) and aggregation "seq-mean-token-mean" covey's
    loss gradient is -(1/N_seq) sum_i A_i grad score_i, so this estimator returns
        A_i = (N_seq / Q) * P_i                           for correct rows of valid groups
        A_k = -(N_seq / Q) * softmax_k(score / tau)       for incorrect rows of valid groups
        A   = 0                                            elsewhere (invalid groups, non-binary r)
    where N_seq = rows with at least one unmasked token: the two gradients are then equal at
    theta = theta_old. Other aggregations change the per-row weighting (document your choice).
    Details: T_max = ``max_len`` or, if 0, the padded width T (the reference uses the padded width,
    = max_response_length with use_max_seq_len); ``length_weight=False`` gives DisCO's uniform P;
    scores come from ``behaviour_logprobs``: on-policy they equal the released current-policy scores
    at theta = theta_old; rows with L = 0 are left out of both sets (the reference would divide by 0);
    script defaults tau = 10, lambda = 0.1.
    """
    g, r, score, n_tok, pos, neg, metrics = binary_sets(batch, "drpo")
    t_max = float(max_len if max_len > 0 else batch.completion_mask.shape[1])
    logw = (1.0 - n_tok / max(t_max, 1.0)) / lam if length_weight else torch.zeros_like(r)
    p_pos = _group_softmax(logw, pos, g.index, g.num)  # P_i, normalised within positives
    p_neg = _group_softmax(score / tau, neg, g.index, g.num)
    scale = float((n_tok > 0).sum()) / g.num
    return result("drpo", scale * (p_pos - p_neg), batch, g, metrics=metrics)
