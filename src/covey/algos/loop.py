"""LOOP's two update guards (arXiv 2502.01600), checked against apple/ml-loop 6ade7b9
(`phi_agents/rl/train.py`: `_filter_rollouts`, `kl_estimate`, `_gradient_step`;
`conf/rl/params/default.yaml`: abs_adv_threshold 0.01, high_kl_threshold 20.0).

- Rollout filter (`algo.abs_adv_threshold`): before the PPO epochs, rollouts whose |advantage| is
  below the threshold are dropped; at least one (the largest |A|) is always kept (ml-loop:
  ``n_keep = max(1, ...)``). A rollout's advantage is one number in ml-loop; for token-level
  advantages covey takes the largest |A| over the row's loss tokens.
- High-KL stop (`algo.high_kl_threshold`): after each mini-batch's backward, the KL estimate is
  ``-mean over rows of sum_t (log pi - log pi_old)`` over the row's loss tokens (ml-loop's k1 on the
  trajectory log importance weight); when its absolute value exceeds the threshold the mini-batch's
  optimizer step is skipped and the rest of the update (its remaining mini-batches and epochs) stops.

The learner calls these (`covey.learner.learner.Learner.update` / `_step`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["keep_large_advantages", "trajectory_kl"]


def keep_large_advantages(advantages: Tensor, mask: Tensor, threshold: float) -> Tensor:
    """Row indices [CPU long, ascending] whose |advantage| >= `threshold`; at least the row with the
    largest |advantage| (the first such row on ties). `advantages` is [N] or [N, T] (then the largest
    |A| over the row's `mask` tokens)."""
    a = advantages.detach().abs().float().cpu()
    if a.dim() == 2:
        a = (a * (mask.cpu() > 0)).amax(dim=-1) if a.shape[1] else torch.zeros(a.shape[0])
    keep = torch.nonzero(a >= threshold).flatten()
    if keep.numel() == 0 and a.numel():
        keep = torch.argmax(a).reshape(1)
    return keep


def trajectory_kl(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """[N] per-row log importance weights' negation, -sum_t (logp - old) over `mask` tokens; ml-loop's
    KL estimate of a mini-batch is the mean of these over its rows."""
    return -((logp.detach().float() - old_logp.float()) * mask).sum(-1)
