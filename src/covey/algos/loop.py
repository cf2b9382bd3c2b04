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

`UpdateGuards` holds both for the policy loss (`covey.learner.policy_loss.PolicyLoss`), which calls it
on every update: a pre-update row filter, an observation of each micro-batch's log-probs, and a stop
signal after each mini-batch's backward passes. Both are no-ops when their threshold is None.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["UpdateGuards", "keep_large_advantages", "trajectory_kl"]


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


class UpdateGuards:
    """`algo.abs_adv_threshold` (the rollout filter) and `algo.high_kl_threshold` (the high-KL stop)
    as hooks of an update; either threshold None turns its guard off."""

    def __init__(self, abs_adv_threshold: float | None = None, high_kl_threshold: float | None = None):
        self.abs_adv_threshold, self.high_kl_threshold = abs_adv_threshold, high_kl_threshold
        self._kl_rows: list[Tensor] = []

    @property
    def reads_every_row(self) -> bool:
        """The KL estimate is a mean over every row of the mini-batch (rows may not be skipped)."""
        return self.high_kl_threshold is not None

    def filter(self, batch):
        """(the rows the update trains, metrics): rows with |A| below the threshold dropped."""
        if self.abs_adv_threshold is None:
            return batch, {}
        keep = keep_large_advantages(batch.advantages, batch.loss_mask(), self.abs_adv_threshold)
        metrics = {"learn/adv_filtered_frac": 1.0 - len(keep) / max(len(batch), 1)}
        return (batch.select(keep) if len(keep) < len(batch) else batch), metrics

    def begin(self) -> None:
        """A mini-batch starts."""
        self._kl_rows = []

    def observe(self, logp: Tensor, old_logp: Tensor, mask: Tensor) -> None:
        """One micro-batch's log-probs (each forward whose loss is backpropagated)."""
        if self.high_kl_threshold is not None:
            self._kl_rows.append(trajectory_kl(logp, old_logp, mask).cpu())

    def stop(self, stats: dict[str, tuple[float, float]]) -> bool:
        """After the mini-batch's backward passes: True when its KL estimate exceeds the threshold
        (`stats` gains `learn/kl_estimate`)."""
        if self.high_kl_threshold is None or not self._kl_rows:
            return False
        kl = float(torch.cat(self._kl_rows).mean())
        self._kl_rows = []
        stats["learn/kl_estimate"] = (kl, 1.0)
        return abs(kl) > self.high_kl_threshold

    def finish(self, stopped: bool) -> dict[str, float]:
        return {"learn/high_kl_stop": float(stopped)} if self.high_kl_threshold is not None else {}
