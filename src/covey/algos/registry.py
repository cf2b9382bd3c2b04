"""Registries: one read-only mapping per algorithm axis (a `covey.registry.Registry`), filled by decorators.

A component is a plain function. Its tunable parameters are its keyword-only arguments (after `*`);
their defaults are the documented defaults, and a pydantic model built from the signature validates
configuration values before any model is loaded. Configuration names a component by its registered
name or by an import path ``package.module:function`` (user code, no covey edit needed).

Uniform signatures, one per axis (shapes: N rows, T tokens, K rewards); every axis returns its value
and its metrics (a dict of floats the learner or trainer only gathers into the step's metrics):

  ADVANTAGES      fn(batch: Rollouts, *, **params) -> AdvantageResult
                  reads batch.rewards / group / masks (and whatever else the method needs);
                  returns advantages [N] or [N, T], metrics, optional sample_mask [N] or [N, T].
  SURROGATES      fn(inp: LossInputs, *, **params) -> (loss_tok [N, T], metrics)
                  per-token loss to *minimise*, before masking and reduction.
  AGGREGATIONS    fn(loss_tok [N, T], mask [N, T], totals: BatchTotals, *, **params) -> (scalar, metrics)
                  reduces with counts of the *whole* batch so micro-batches add up to it.
  KL_ESTIMATORS   fn(logp [N, T], ref_logp [N, T], mask [N, T], *, **params) -> (kl_tok [N, T], metrics)
  CORRECTIONS     fn(inp: CorrectionInputs, *, **params) -> (weight_tok [N, T], metrics)
                  detached per-token multipliers of the surrogate loss (0 masks a token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from torch import Tensor

from covey.registry import Caps, Registry

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "CORRECTIONS",
    "KL_ESTIMATORS",
    "SURROGATES",
    "AdvantageResult",
    "BatchTotals",
    "CorrectionInputs",
    "LossInputs",
    "SurrogateCaps",
]


# ---------------------------------------------------------------------------- axis records
class AdvantageResult(NamedTuple):
    advantages: Tensor  # [N] or [N, T] float32
    metrics: dict[str, float]
    sample_mask: Tensor | None = None  # [N] or [N, T] float32, 0 = row (token) excluded from the loss


@dataclass
class LossInputs:
    """What a surrogate (and a regularizer) sees. Token tensors are [N, T]; `advantages` already
    broadcast to tokens. The optional fields are filled only when a configured component declares
    it reads them (registry `requires`):

      entropy    "entropies" or "stat:entropy"     current-policy token entropy (with gradient)
      stats      "stat:sum_p2", "stat:vocab_mean_logp"   current-policy statistics, no gradient
      old_stats  the same names                    pi_old's statistics (recomputed with old_logp;
                                                   the current ones, detached, when pi_old is the
                                                   sampling policy and was not recomputed)
      group      "group"                           [N] long group ids; the learner keeps whole groups
                                                   in one micro-batch and one mini-batch
      row        "row" (or "group")                per-row values [N]: "reward" (scalar reward),
                                                   "group_mean", "group_std" (unbiased) over the
                                                   whole group, and "col:<name>" for each reward
                                                   column (e.g. TRPA's preference levels)
      ref_logp   (always, when the batch has it)   [N, T] log pi_ref of each token, no gradient
                                                   ("ref_logprobs" makes the trainer fill it)
      turn       (always, when the batch has it)   [N, T] long agent turn of each token (multi-turn
                                                   episodes; -1 on env tokens), None for single-turn
    """

    logp: Tensor  # current policy, carries gradient
    old_logp: Tensor  # pi_old (or proximal policy), no gradient
    advantages: Tensor
    mask: Tensor  # float 0/1
    entropy: Tensor | None = None  # current-policy token entropy, where a method needs it
    stats: dict[str, Tensor] = field(default_factory=dict)
    old_stats: dict[str, Tensor] = field(default_factory=dict)
    group: Tensor | None = None
    row: dict[str, Tensor] = field(default_factory=dict)
    turn: Tensor | None = None
    ref_logp: Tensor | None = None


@dataclass
class CorrectionInputs:
    """What an importance correction sees. All [N, T], no gradient."""

    old_logp: Tensor  # trainer-side log pi_old (proximal policy for AReaL)
    behaviour_logp: Tensor  # log-probs reported by the engine that sampled the tokens
    mask: Tensor


@dataclass(frozen=True)
class BatchTotals:
    """Counts over the whole optimisation batch (all micro-batches, all ranks)."""

    num_tokens: float  # sum of the loss mask
    num_seqs: float  # rows with at least one unmasked token
    max_new_tokens: int  # generation budget (constant normalisers)


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape)


def _tensor_like(what: str, x, want: tuple[int, ...] | None) -> str | None:
    """None when `x` is a tensor of shape `want` (any shape when `want` is None), else the problem."""
    if not isinstance(x, Tensor):
        return f"{what} of type {type(x).__name__}"
    if want is not None and _shape(x) != want:
        return f"{what} of shape {_shape(x)} (expected {want})"
    return None


def _pair(name: str, like: Callable[[tuple], Any]) -> Callable[[Any, tuple], str | None]:
    """(tensor shaped like `like(args)`, metrics dict): surrogates, corrections, KL estimators."""

    def check(x, args) -> str | None:
        if not (isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], Tensor)):
            return f"a {type(x).__name__}"
        ref = like(args)
        problem = _tensor_like(name, x[0], _shape(ref) if isinstance(ref, Tensor) else None)
        return problem or (None if isinstance(x[1], dict) else f"metrics of type {type(x[1]).__name__}")

    return check


def _advantage(x, args) -> str | None:
    if not isinstance(x, AdvantageResult):
        return f"a {type(x).__name__}"
    if not isinstance(x.advantages, Tensor):
        return f"advantages of type {type(x.advantages).__name__}"
    ids = getattr(args[0], "completion_ids", None) if args else None
    if isinstance(ids, Tensor) and ids.dim() == 2:
        n, t = _shape(ids)
        if _shape(x.advantages) not in ((n,), (n, t)):
            return f"advantages of shape {_shape(x.advantages)} for a batch of {n} rows x {t} tokens"
        mask = x.sample_mask
        problem = None if mask is None else _tensor_like("sample_mask", mask, (n, t) if getattr(mask, "dim", lambda: 1)() == 2 else (n,))
        if problem:
            return f"{problem} (a batch of {n} rows)"
    return None if isinstance(x.metrics, dict) else f"metrics of type {type(x.metrics).__name__}"


def _scalar(x, args) -> str | None:
    if not (isinstance(x, tuple) and len(x) == 2):
        return f"a {type(x).__name__}" + (f" of shape {_shape(x)}" if isinstance(x, Tensor) else "")
    if not (isinstance(x[0], Tensor) and x[0].dim() == 0):
        return "a loss " + (f"of shape {_shape(x[0])}" if isinstance(x[0], Tensor) else f"of type {type(x[0]).__name__}")
    return None if isinstance(x[1], dict) else f"metrics of type {type(x[1]).__name__}"


_RETURNS: dict[str, Callable[[Any, tuple], str | None]] = {
    "advantage": _advantage,
    "surrogate": _pair("loss_tok", lambda args: getattr(args[0], "logp", None) if args else None),
    "correction": _pair("weight_tok", lambda args: getattr(args[0], "mask", None) if args else None),
    "aggregation": _scalar,
    "kl": _pair("kl_tok", lambda args: args[0] if args else None),
}
_RETURN_DOC = {
    "advantage": "AdvantageResult(advantages [N] or [N,T] tensor, metrics dict, sample_mask or None)",
    "surrogate": "(loss_tok [N,T] tensor, metrics dict)",
    "correction": "(weight_tok [N,T] tensor, metrics dict)",
    "aggregation": "(a scalar (0-dim) tensor, metrics dict)",
    "kl": "(kl_tok [N,T] tensor, metrics dict)",
}


class SurrogateCaps(Caps):
    """What a surrogate declares (its `caps`; defaults: neither).

    zero_at_zero_advantage:  row-local, and zero with its gradient wherever the advantage is 0 (any
                             ratio, any weight): the learner may leave all-zero-advantage rows out
                             (`optim.skip_zero_advantage`).
    per_mc:                  applied to one Monte Carlo term of a likelihood estimate at a time (one
                             forward and backward per term; masked-diffusion models only).
    trust_region:            the regularizer that is its trust region (it has no clip of its own): the
                             config must list it in `algo.regularizers`.
    aggregation:             the aggregation its per-row scale assumes (disco, trpa): others are refused.
    """

    zero_at_zero_advantage: bool = False
    per_mc: bool = False
    trust_region: str | None = None
    aggregation: str | None = None


class AdvantageCaps(Caps):
    """What an advantage estimator declares (its `caps`).

    exact_surrogate:  the estimator is a loss's gradient at pi_old, exact for one update per batch; with
                      several (epochs x mini_batches) the config must choose this surrogate, which
                      recomputes that loss from the current log-probs (disco, trpa).
    """

    exact_surrogate: str | None = None


def _axis(kind: str, context: tuple[str, ...], signature: str, caps: type[Caps] = Caps) -> Registry:
    return Registry(kind, context=context, signature=signature, returns=_RETURNS[kind], returns_doc=_RETURN_DOC[kind],
                    defaults_required=True, caps=caps)  # fmt: skip


ADVANTAGES = _axis("advantage", ("batch",), "fn(batch: Rollouts, *, **params) -> AdvantageResult", AdvantageCaps)
SURROGATES = _axis("surrogate", ("inp",), "fn(inp: LossInputs, *, **params) -> (loss_tok[N,T], metrics)", SurrogateCaps)
AGGREGATIONS = _axis("aggregation", ("loss_tok", "mask", "totals"),
                     "fn(loss_tok[N,T], mask[N,T], totals: BatchTotals, *, **params) -> (scalar, metrics)")  # fmt: skip
KL_ESTIMATORS = _axis("kl", ("logp", "ref_logp", "mask"),
                      "fn(logp[N,T], ref_logp[N,T], mask[N,T], *, **params) -> (kl_tok[N,T], metrics)")  # fmt: skip
CORRECTIONS = _axis("correction", ("inp",), "fn(inp: CorrectionInputs, *, **params) -> (weight_tok[N,T], metrics)")

register_advantage = ADVANTAGES.register
register_surrogate = SURROGATES.register
register_aggregation = AGGREGATIONS.register
register_kl = KL_ESTIMATORS.register
register_correction = CORRECTIONS.register
