"""Step hooks: algorithm choices that act around a training step's update rather than inside its loss.

The trainer builds the hooks of the run's `algo` once and calls every method of every hook on every
step, in order (the defaults do nothing, as prime-rl's `orchestrator/algo/base.py` hooks do):

    around_update(step, batch)   a context around the learner's update; it yields a dict of metrics
                                 that the trainer logs after the update
    after_update(step)           after the update and the weight sync (also on a skipped step);
                                 returns metrics
    state_dict() / load_state_dict(state)   kept in checkpoints under `checkpoint_key` (when the
                                 state is not empty)
    check_run(cfg)               (classmethod) refuses a run config before any model loads

`step` is 1-based: the step being trained. Two hooks exist:

    algo.logprob_source    InternalLayerSource: the learner's log-probs from an internal layer (BuPO)
    algo.reference_reset   ReferenceReset: pi_ref <- pi_theta on a schedule (ProRL)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["InternalLayerSource", "ReferenceReset", "StepHook", "check_hooks", "step_hooks"]


class StepHook:
    """Base step hook (module docstring): every method is a no-op."""

    checkpoint_key: str | None = None

    @classmethod
    def check_run(cls, cfg) -> None:
        """Refuse (ValueError) a run config this hook cannot serve."""

    @contextlib.contextmanager
    def around_update(self, step: int, batch) -> Iterator[dict[str, float]]:
        yield {}

    def after_update(self, step: int) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class InternalLayerSource(StepHook):
    """BuPO's learner log-prob source (`algo.logprob_source`): for steps <= until_step the learner
    sees the policy read out at an internal layer (same parameters, `covey.models.internal_layer`)
    and recomputes pi_old with it. Paper: "Bottom-up Policy Optimization", arXiv 2512.19673."""

    def __init__(self, spec, learner):
        self.spec, self.learner = spec, learner

    @contextlib.contextmanager
    def around_update(self, step: int, batch) -> Iterator[dict[str, float]]:
        spec = self.spec
        if step > spec.until_step:
            yield {"learn/internal_layer": -1.0}
            return
        from covey.models.internal_layer import InternalLayerPolicy

        policy = self.learner.model
        self.learner.model = InternalLayerPolicy(policy, spec.layer, spec.final_norm)
        batch.old_logprobs, batch.recompute_old_logprobs = None, True  # pi_old of the internal policy
        try:
            yield {"learn/internal_layer": float(spec.layer)}
        finally:
            self.learner.model = policy


class ReferenceReset(StepHook):
    """ProRL's reference reset (`algo.reference_reset`): after a scheduled step, pi_ref <- pi_theta and,
    when asked, the optimizer's moments are cleared (the LR schedule goes on). Paper: "ProRL:
    Prolonged Reinforcement Learning Expands Reasoning Boundaries", arXiv 2505.24864."""

    checkpoint_key = "reference"

    def __init__(self, spec, reference, optimizer):
        self.spec, self.reference, self.optimizer = spec, reference, optimizer
        self.last_reset = 0  # the step after which the reference was last reset (0: never)

    @classmethod
    def check_run(cls, cfg) -> None:
        if cfg.model.lora is not None:
            raise ValueError("algo.reference_reset copies the policy into the reference model, but with model.lora the "
                             "reference is the base model under the adapters: drop one of them")  # fmt: skip

    def after_update(self, step: int) -> dict[str, float]:
        if not self.spec.due(step):
            return {}
        self.reference.reset_to_policy()
        if self.spec.reset_optimizer:
            self.optimizer.state.clear()
        self.last_reset = step
        return {"ref/reset": 1.0}

    def state_dict(self) -> dict[str, Any]:
        """The reset reference (nothing while it is still the initial model)."""
        return {"step": self.last_reset, "weights": self.reference.state_dict()} if self.last_reset else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.reference.load_state_dict(state["weights"])
            self.last_reset = state["step"]


def _configured(algo) -> list[tuple[type[StepHook], Any]]:
    """(hook class, its spec) of each hook `algo` configures, in calling order."""
    pairs = [(InternalLayerSource, algo.logprob_source), (ReferenceReset, algo.reference_reset)]
    return [(cls, spec) for cls, spec in pairs if spec is not None]


def check_hooks(cfg) -> None:
    """Each configured hook's own check of the run config (before any model loads)."""
    for cls, _ in _configured(cfg.algo):
        cls.check_run(cfg)


def step_hooks(algo, *, learner, reference, optimizer) -> list[StepHook]:
    """The run's step hooks, built over its learner, reference policy (None when there is none) and optimizer."""
    build = {InternalLayerSource: lambda s: InternalLayerSource(s, learner),
             ReferenceReset: lambda s: ReferenceReset(s, reference, optimizer)}  # fmt: skip
    return [build[cls](spec) for cls, spec in _configured(algo)]
