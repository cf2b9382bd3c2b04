"""DisCO as an advantage: the per-row weights whose REINFORCE gradient equals DisCO's discriminative objective.

Paper: "DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization",
arXiv 2505.12366. Status VERIFIED-CODE for the objective (Optimization-AI/DisCO `bd2b07812934`,
`compute_policy_loss_disco{,b}_{logL,Lratio}`; the logL loss was
re-read in the authors' DRPO code base, which carries the same `compute_policy_loss_disco_logL`).
Only the advantage part: DisCO's squared-hinge KL constraint to pi_old is the regularizer `disco_kl`
(`covey.algos.regularizers.kl`).
The same authors' DRPO adds a length weight to the positives (covey `drpo`); the gradient derivation
is the same and is written out in `covey.algos.advantages.drpo`.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import PosFloat, result
from covey.algos.advantages.drpo import _group_softmax, binary_sets
from covey.algos.registry import AdvantageCaps, AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["disco"]


@register_advantage(
    "disco", group_relative=True,
    paper="DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization "
          "(VERIFIED-CODE; advantage part, KL constraint: regularizer disco_kl)",
    arxiv="2505.12366",
)  # fmt: skip
def disco(batch: Rollouts, *, tau: PosFloat = 10.0, neg: Literal["softmax", "mean"] = "softmax") -> AdvantageResult:
    """DisCO gradient-equivalent advantage. Shapes: r [N] (binary), logp / mask [N, T] -> A [N].

    Released objective, per group g with at least one correct (r == 1) and one incorrect (r == 0) row,
    Q = number of groups in the batch (invalid ones count), score_i = (1/L_i) sum_t logp_it:
        disco   (neg="softmax"):  J_g = mean_pos score - tau * log sum_neg exp(score / tau)
        disco-b (neg="mean"):     J_g = mean_pos score - mean_neg score
        loss = -(1/Q) sum_g J_g  (+ sg(max(beta (kl - delta), 0)) * kl, the KL constraint: regularizer disco_kl)
    With surrogate "reinforce" (or PPO-clip on-policy) and aggregation "seq-mean-token-mean" the
    gradients are equal at theta = theta_old when
        A_i = (N_seq / Q) / |pos_g|                        correct rows of valid groups
        A_k = -(N_seq / Q) * softmax_k(score / tau)        incorrect rows (neg="softmax")
        A_k = -(N_seq / Q) / |neg_g|                       incorrect rows (neg="mean")
        A   = 0                                            elsewhere (invalid groups, non-binary r)
    N_seq = rows with at least one unmasked token. The logL and Lratio scores have the same gradient at
    theta = theta_old (ratio = 1), so one estimator covers both. The released code recomputes the loss on
    every mini-batch from the current log-probs: this form is exact for one update per batch only, and
    with `optim.mini_batches * optim.epochs > 1` the config is refused unless `algo.surrogate` is the
    exact `disco` surrogate (`covey.algos.group_losses`). Scores come from ``behaviour_logprobs``. Defaults: tau = 10
    (logL script; the Lratio script uses tau = 1). Rows with L = 0 are in neither set.
    """
    g, r, score, n_tok, pos, negs, metrics = binary_sets(batch, "disco")
    p_pos = _group_softmax(torch.zeros_like(r), pos, g.index, g.num)  # 1 / |pos_g|
    p_neg = _group_softmax(score / tau if neg == "softmax" else torch.zeros_like(r), negs, g.index, g.num)
    scale = float((n_tok > 0).sum()) / g.num
    return result("disco", scale * (p_pos - p_neg), batch, g, metrics=metrics)


disco.caps = AdvantageCaps(exact_surrogate="disco")  # several updates per batch: the surrogate that recomputes the loss (compat.check_algo)
