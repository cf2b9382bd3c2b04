"""The regularizer axis: extra loss terms with their own gates, normalisation and state.

A regularizer is a small object, built once per run from `algo.regularizers: [{name, ...params}]`
and called by the learner on every micro-batch after the surrogate:

    reg, metrics = regularizer(inp: LossInputs, totals: BatchTotals)

`reg` is either `[N, T]` (added to the surrogate's per-token loss before the aggregation, so it is
reduced like the policy loss) or a scalar whose denominators come only from `totals` (whole
mini-batch counts), so the micro-batch values add up to the mini-batch's. Metrics are python floats;
the learner logs them as `reg/<name>/<key>`.

Hooks (all optional, no-ops in `Regularizer`):

    prepass              True: the learner runs a no-grad forward over the whole mini-batch first and
                         calls `observe(inp, totals)` on every micro-batch of it, so a term whose
                         coefficient or centre is a whole-mini-batch statistic (DisCO's KL, R2VPO's
                         mean ratio, LLDS's gated-token count) is exact under micro-batching. With a
                         single micro-batch the learner observes the gradient forward itself (no
                         extra forward).
    begin()              a new mini-batch starts (clear the pre-pass sums)
    after_step()         after each optimizer step (dual variables); returns metrics
    after_update()       after each training step's last optimizer step (histories); returns metrics
    state_dict() / load_state_dict(state)    saved in checkpoints and restored on resume

Parameters are the keyword-only arguments of ``__init__`` (each with its documented default),
validated when the config is read. `requires` at registration names what the learner must add to
`LossInputs` (see `covey.algos.registry.LossInputs`): "stat:entropy", "stat:sum_p2",
"stat:vocab_mean_logp", "group".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from covey.algos.registry import BatchTotals, LossInputs
from covey.registry import Caps, Registry, Spec

__all__ = ["REGULARIZERS", "Regularizer", "RegularizerCaps", "RegularizerSet", "detached", "register_regularizer"]


class Regularizer:
    """Base class of a regularizer (see the module docstring for the protocol)."""

    prepass: bool = False

    def begin(self) -> None:
        """A new mini-batch starts."""

    def observe(self, inp: LossInputs, totals: BatchTotals) -> None:
        """Pre-pass over one micro-batch (no gradient) when `prepass` is True."""

    def __call__(self, inp: LossInputs, totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
        raise NotImplementedError

    def after_step(self) -> dict[str, float]:
        return {}

    def after_update(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"regularizer {type(self).__name__} keeps no state, but the checkpoint holds {sorted(state)}")


class RegularizerCaps(Caps):
    """What a regularizer declares (its `caps`; defaults: neither).

    entropy_bonus:        it holds the entropy bonus itself (`algo.entropy_coef` would add it twice).
    old_policy_trust_region:  a term on pi_theta against pi_old, which never acts with one update per
                          batch (the policy is pi_old then; warned when the config is read).
    """

    entropy_bonus: bool = False
    old_policy_trust_region: bool = False


REGULARIZERS = Registry(
    "regularizer",
    caps=RegularizerCaps,
    protocol=Regularizer,
    signature="class R(covey.algos.regularizers.Regularizer): __init__(self, *, **params); "
              "__call__(inp: LossInputs, totals: BatchTotals) -> (reg [N,T] or scalar, metrics)",
    defaults_required=True,
)  # fmt: skip
register_regularizer = REGULARIZERS.register


def detached(inp: LossInputs) -> LossInputs:
    """`inp` without gradient (for `observe` on a gradient forward)."""
    return LossInputs(
        inp.logp.detach(), inp.old_logp, inp.advantages, inp.mask, None if inp.entropy is None else inp.entropy.detach(),
        inp.stats, inp.old_stats, inp.group, inp.row, inp.turn,
    )  # fmt: skip


class RegularizerSet:
    """The configured regularizers of a run, in config order: what the learner calls and the
    checkpoint saves (`state_dict` keyed by position and name)."""

    def __init__(self, specs: Iterable[Spec] = ()):
        self.items: list[tuple[str, Regularizer]] = [(s.name, REGULARIZERS.build(s.name, s.params)) for s in specs]
        self.requires = {f for s in specs for f in REGULARIZERS.get(s.name).requires}

    def __len__(self) -> int:
        return len(self.items)

    @property
    def prepass(self) -> bool:
        return any(r.prepass for _, r in self.items)

    def begin(self) -> None:
        for _, r in self.items:
            r.begin()

    def observe(self, inp: LossInputs, totals: BatchTotals) -> None:
        for _, r in self.items:
            if r.prepass:
                r.observe(inp, totals)

    def __call__(self, inp: LossInputs, totals: BatchTotals) -> tuple[Tensor | None, Tensor | None, dict[str, float]]:
        """(sum of the [N, T] terms or None, sum of the scalar terms or None, metrics)."""
        tok: Tensor | None = None
        scalar: Tensor | None = None
        metrics: dict[str, float] = {}
        for name, r in self.items:
            reg, m = r(inp, totals)
            if not isinstance(reg, Tensor) or reg.dim() not in (0, 2) or (reg.dim() == 2 and reg.shape != inp.mask.shape):
                got = f"shape {tuple(reg.shape)}" if isinstance(reg, Tensor) else type(reg).__name__
                raise ValueError(f"regularizer {name!r} returned {got}; it must return a scalar or [N, T] = {tuple(inp.mask.shape)} tensor")
            if reg.dim() == 2:
                tok = reg if tok is None else tok + reg
            else:
                scalar = reg if scalar is None else scalar + reg
            metrics.update({f"reg/{name}/{k}": float(v) for k, v in m.items()})
        return tok, scalar, metrics

    def after_step(self) -> dict[str, float]:
        return {f"reg/{name}/{k}": float(v) for name, r in self.items for k, v in r.after_step().items()}

    def after_update(self) -> dict[str, float]:
        return {f"reg/{name}/{k}": float(v) for name, r in self.items for k, v in r.after_update().items()}

    def state_dict(self) -> dict[str, Any]:
        return {f"{i}:{name}": r.state_dict() for i, (name, r) in enumerate(self.items)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for i, (name, r) in enumerate(self.items):
            r.load_state_dict((state or {}).get(f"{i}:{name}", {}))


def masked_token_mean(x: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """sum(x * mask) / whole-mini-batch token count (0 when the mini-batch has no token)."""
    return (x * mask).sum() / max(totals.num_tokens, 1.0)


def as_float(x: Tensor | float) -> float:
    return float(x.detach()) if isinstance(x, Tensor) else float(x)


def zeros_like_scalar(inp: LossInputs) -> Tensor:
    """A 0 connected to the graph of `inp.logp` (so a term that gates everything out still backpropagates)."""
    return inp.logp.sum() * 0.0 if inp.logp.requires_grad else torch.zeros((), device=inp.logp.device)
