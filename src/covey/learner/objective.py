"""What a learner's update optimises: the `Objective` handed to `covey.learner.learner.Learner`.

The learner is the backend of every update, as verl's `BaseEngine.train_batch(data, loss_function)`
is: it cuts the batch into mini-batches (optimizer steps) and micro-batches (gradient accumulation),
runs the forward passes it is asked for, the backward passes, clipping and the optimizer. The
objective decides everything that is a choice of loss; the learner calls each hook on every update
(the defaults here do nothing, as prime-rl's `orchestrator/algo/base.py` hooks do):

    prepare(learner, batch, gen)   once per update: the rows to train (None: nothing to learn), the
                                   per-row inputs carried through row selection, and metrics
    mini_batches(learner, batch, gen)  one epoch's row indices per optimizer step
    begin_step(learner, mb, extra) an optimizer step starts: the rows it trains, their micro-batches,
                                   the whole-mini-batch totals its loss divides by, and metrics
    loss(learner, micro, mask, totals, extra, ...)  the loss of one micro-batch (None: it has none)
                                   and its metrics as {key: (value, weight)} (weighted means over
                                   the step's micro-batches)
    end_step(learner, mb, totals, stats)  after the backward passes: True skips this optimizer step
                                   and ends the update (a stop signal)
    after_step(), finish(stopped)  metrics after each optimizer step, and after the update
    state_dict(), load_state_dict()  state kept in checkpoints

The default objective is the policy-gradient loss assembled from the algorithm axes
(`covey.learner.policy_loss.PolicyLoss`); the preference mode trains `covey.preference.objective.PreferenceLoss`;
`algo.objective: {name, ...params}` names any other from the `OBJECTIVES` registry (`covey.objectives`:
offline step data, offline-enhanced policy gradient, evolution strategies), built as
``factory(cfg, policy, device, **params)``; its `ObjectiveCaps.check_run(cfg)` refuses, when the config is
read, a run it cannot train (`covey.compat.check_objective`). `FrozenPolicy` trains nothing (a rollout
strategy that learns without gradients declares ``StrategyCaps(updates_policy=False)``). Attributes the trainer reads: `requires` (optional
`Rollouts` fields the trainer fills for it, `covey.learner.fillers`), `uses_advantages` (the trainer
runs the advantage estimator first), `temperature` (the temperature of the learner's log-probs,
None: the sampling temperature) and `per_mc` (with a likelihood estimate as the log-prob source, the
loss is backpropagated once per Monte Carlo sample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from covey.registry import Caps, Registry
from covey.rollouts import Rollouts

__all__ = ["FrozenPolicy", "OBJECTIVES", "Objective", "ObjectiveCaps", "Step", "register_objective"]


@dataclass
class Step:
    """One optimizer step as `Objective.begin_step` sets it up.

    rows:     the mini-batch rows it trains (a subset when rows are skipped).
    extra:    their per-row inputs ({name: [M, ...] tensor}).
    chunks:   row indices [CPU long] of its micro-batches.
    totals:   the whole-mini-batch counts its loss divides by (passed to every `loss` call).
    stats:    metrics as {key: (value, weight)}.
    observe:  a flag passed to `loss` (the policy loss: the one micro-batch's forward also serves a
              regularizer's whole-mini-batch statistics).
    """

    rows: Rollouts
    extra: dict[str, Tensor]
    chunks: list[Tensor]
    totals: Any = None
    stats: dict[str, tuple[float, float]] = field(default_factory=dict)
    observe: bool = False


class Objective:
    """Base objective: every row trains, random mini-batches of rows, micro-batches of prompt groups."""

    requires: frozenset[str] = frozenset()
    uses_advantages: bool = True
    temperature: float | None = None
    per_mc: bool = False  # with a likelihood estimate: one forward and backward per Monte Carlo sample

    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts | None, dict[str, Tensor], dict[str, float]]:
        return batch, {}, {}

    def mini_batches(self, learner, batch: Rollouts, generator) -> list[Tensor]:
        return learner.mini_batch_rows(batch, generator)

    def begin_step(self, learner, mb: Rollouts, extra: dict[str, Tensor]) -> Step:
        return Step(mb, extra, learner._chunks(mb))

    def loss(self, learner, micro: Rollouts, mask: Tensor, totals: Any, extra: dict[str, Tensor], *,
             observe: bool = False, logp: Tensor | None = None,
             old: Tensor | None = None) -> tuple[Tensor | None, dict[str, tuple[float, float]]]:  # fmt: skip
        raise NotImplementedError

    def end_step(self, learner, mb: Rollouts, totals: Any, stats: dict[str, tuple[float, float]]) -> bool:
        return False

    def after_step(self) -> dict[str, float]:
        return {}

    def finish(self, stopped: bool) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class ObjectiveCaps(Caps):
    """What an objective of `OBJECTIVES` declares (its `caps`).

    check_run:  check_run(cfg) raising ValueError for a run config it cannot train (before any model loads).
    """

    check_run: Callable[[Any], None] | None = None


OBJECTIVES = Registry("objective", context=("cfg", "policy", "device"), caps=ObjectiveCaps)
"""`algo.objective` choices; entries register from `covey.objectives`."""
register_objective = OBJECTIVES.register


class FrozenPolicy(Objective):
    """No update: every step's `prepare` has nothing to learn, so no forward, backward or optimizer step
    runs and the weights (and the optimizer and its schedule) stay as they are. For a run whose rollout
    strategy learns without gradients (``StrategyCaps(updates_policy=False)``: Training-Free GRPO's
    experience library); the advantage estimator is not run either."""

    uses_advantages = False

    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts | None, dict[str, Tensor], dict[str, float]]:
        return None, {}, {"learn/frozen": 1.0}
