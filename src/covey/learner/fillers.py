"""Batch fields the trainer fills on request: the fillers.

A component names the optional `Rollouts` fields it reads in its registry `requires` (an advantage
estimator, a surrogate, a regularizer, a sampler, the objective). The trainer collects those names
and, for each that has a filler here, fills the field of every scored batch before the advantages are
computed; no trainer code names the component that asked. `covey.compat` treats these fields as
always provided.

    field            how it is filled
    ref_logprobs     no-grad log-probs of the frozen reference policy (the trainer builds one)
    sum_p2           sum_v pi_old(v|s)^2 at every position, from the learner's chunked head
    probe_logprobs   no-grad pi_old log-probs at the rollout controller's `probe_temperature`
                     (`Rollouts.controller`, set by a strategy that provides `probe_temperature`)
    entropies        asked of the engine while sampling (`SamplingParams.return_entropies`)
    old_logprobs     recomputed by the learner before its update (`Learner.recompute_old`)

A filler runs only where its field is still None (a strategy may have filled it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from covey.rollouts import Rollouts

__all__ = ["FILLERS", "Filler", "fill_fields", "needs_reference"]


@dataclass(frozen=True)
class Filler:
    """How one optional `Rollouts` field gets its value.

    fill:       fill(batch, learner, reference) writes the field; None: written elsewhere (`by`).
    reference:  it reads the frozen reference policy.
    engine:     the engine writes it while sampling when asked.
    by:         who writes it, for the table above and `covey list`.
    """

    field: str
    fill: Callable[[Rollouts, object, object], None] | None = None
    reference: bool = False
    engine: bool = False
    by: str = "the trainer"


def _ref_logprobs(batch: Rollouts, learner, reference) -> None:
    with reference.active() as ref_model:
        learner.fill_logprobs(batch, model=ref_model, field="ref_logprobs")


def _sum_p2(batch: Rollouts, learner, reference) -> None:
    batch.sum_p2 = learner.token_stats(batch, ("sum_p2",))["sum_p2"]


def _probe_logprobs(batch: Rollouts, learner, reference) -> None:
    temperature = (batch.controller or {}).get("probe_temperature")
    if temperature is None:
        raise ValueError("a component needs probe_logprobs, but the batch's rollout strategy set no controller "
                         "probe_temperature (use a rollout.strategy that provides probe_temperature)")  # fmt: skip
    sampling_temperature, learner.temperature = learner.temperature, temperature
    try:
        learner.fill_logprobs(batch, field="probe_logprobs")
    finally:
        learner.temperature = sampling_temperature


FILLERS: dict[str, Filler] = {
    f.field: f
    for f in (
        Filler("ref_logprobs", _ref_logprobs, reference=True),
        Filler("sum_p2", _sum_p2),
        Filler("probe_logprobs", _probe_logprobs),
        Filler("entropies", engine=True, by="the engine"),
        Filler("old_logprobs", by="the learner"),
    )
}
"""Field -> filler, in the order the trainer runs them."""


def needs_reference(fields: Iterable[str]) -> bool:
    """Whether filling `fields` reads the frozen reference policy."""
    return any(FILLERS[f].reference for f in fields if f in FILLERS)


def fill_fields(batch: Rollouts, fields: Iterable[str], learner, reference) -> None:
    """Fill each of `fields` that has a filler and is still None in `batch`, in `FILLERS` order."""
    wanted = set(fields)
    for name, f in FILLERS.items():
        if name in wanted and f.fill is not None and getattr(batch, name) is None:
            f.fill(batch, learner, reference)
