"""Bounded staleness: AReaL's admission control, and the per-step staleness metrics.

The rule. The policy version v counts finished training steps (the weights after step s are version
s + 1). A batch trained at step k (while the weights are version k) that was generated with version
b has staleness k - b. `max_staleness` (eta) bounds it: k - b <= eta. eta = 0 is synchronous
training.

Admission control paces generation instead of discarding what it made. Checked against
inclusionAI/AReaL @ 747f9f5b5409c5dc682aa38fc005221862257e72, `areal/infra/staleness_manager.py`
(`StalenessManager.get_capacity`):

    capacity = min(max_concurrent - running, (eta + v + 1) * B - (accepted + running))

with B the consumer batch size (rollouts the trainer takes per version), `running` the rollouts
being generated and `accepted` those finished (AReaL's counters; `rejected` ones do not count). A
new rollout is started only while capacity > 0. covey's thread executor admits whole step batches
(B = 1 unit = one step's batch), so batch k (0-based; k batches were started before it) is admitted
at version v exactly when k - v <= eta; generated with the weights of version v (they never change
under a running generation) and trained at step k, its staleness is k - v <= eta.

`restore` is covey's resume rule: accepted = v * B, plus the batches a checkpoint carried finished
but not yet trained. (AReaL's `on_version_recovered` does the first part; it is not in the commit
read above.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["StalenessGate", "staleness_metrics"]


@dataclass
class StalenessGate:
    """Admission counters and AReaL's capacity formula (not thread-safe: the caller holds a lock).

    max_staleness:  eta >= 0.
    batch_size:     B, units consumed per version (1 = one step batch).
    max_concurrent: units generated at once.
    """

    max_staleness: int
    batch_size: int = 1
    max_concurrent: int = 1
    running: int = 0
    accepted: int = 0
    rejected: int = 0

    def __post_init__(self):
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        if self.batch_size < 1 or self.max_concurrent < 1:
            raise ValueError(f"batch_size and max_concurrent must be >= 1, got {self.batch_size}, {self.max_concurrent}")

    def capacity(self, version: int) -> int:
        """Units that may start now at policy `version` (<= 0: none); AReaL's `get_capacity`."""
        concurrency = self.max_concurrent - self.running
        staleness = (self.max_staleness + version + 1) * self.batch_size - (self.accepted + self.running)
        return min(concurrency, staleness)

    def admit(self, version: int) -> bool:
        """Start one unit if there is capacity at `version`; True when started."""
        if self.capacity(version) <= 0:
            return False
        self.running += 1
        return True

    def finish(self, accepted: bool = True) -> None:
        """A started unit ended: accepted (it will be trained on) or rejected (it frees its slot)."""
        if self.running < 1:
            raise RuntimeError("StalenessGate.finish without a running unit")
        self.running -= 1
        if accepted:
            self.accepted += 1
        else:
            self.rejected += 1

    def restore(self, version: int, carried: int = 0) -> None:
        """After a resume at `version`: `version * B` units were consumed, `carried` more were
        finished and saved with the checkpoint; nothing is running."""
        self.running, self.rejected = 0, 0
        self.accepted = version * self.batch_size + carried


def staleness_metrics(step: int, behaviour_version: int, policy_version: Tensor | None, mask: Tensor | None,
                      max_lag: int = 4) -> dict[str, float]:  # fmt: skip
    """Staleness of the batch trained at `step`: `async/staleness` = step - the version it was
    admitted and generated at (the bounded quantity), and from the per-token versions (when
    recorded) the version lag of every generated token: mean, max and a histogram
    `async/token_lag/<d>` (fraction of tokens d versions behind; `<max_lag>+` collects the rest)."""
    out = {"async/staleness": float(step - behaviour_version)}
    if policy_version is None or mask is None or policy_version.numel() == 0:
        return out
    keep = mask.bool()
    lag = (step - policy_version[keep]).clamp(min=0)
    if lag.numel() == 0:
        return out
    out["async/token_lag_mean"] = float(lag.float().mean())
    out["async/token_lag_max"] = float(lag.max())
    counts = torch.bincount(lag.clamp(max=max_lag), minlength=max_lag + 1).float() / lag.numel()
    for d, frac in enumerate(counts.tolist()):
        out[f"async/token_lag/{d}{'+' if d == max_lag else ''}"] = frac
    return out
