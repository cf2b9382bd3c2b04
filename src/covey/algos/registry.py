"""Registries: one read-only mapping per algorithm axis, filled by decorators.

A component is a plain function. Its tunable parameters are its keyword-only arguments (after `*`);
their defaults are the documented defaults, and a pydantic model built from the signature validates
configuration values before any model is loaded. Configuration names a component by its registered
name or by an import path ``package.module:function`` (user code, no covey edit needed).

Uniform signatures, one per axis (shapes: N rows, T tokens, K rewards):

  ADVANTAGES      fn(batch: Rollouts, *, **params) -> AdvantageResult
                  reads batch.rewards / group / masks (and whatever else the method needs);
                  returns advantages [N] or [N, T], metrics, optional sample_mask [N] or [N, T].
  SURROGATES      fn(inp: LossInputs, *, **params) -> (loss_tok [N, T], metrics)
                  per-token loss to *minimise*, before masking and reduction.
  AGGREGATIONS    fn(loss_tok [N, T], mask [N, T], totals: BatchTotals, *, **params) -> scalar
                  reduces with counts of the *whole* batch so micro-batches add up to it.
  KL_ESTIMATORS   fn(logp [N, T], ref_logp [N, T], *, **params) -> kl_tok [N, T]
  CORRECTIONS     fn(inp: CorrectionInputs, *, **params) -> (weight_tok [N, T], metrics)
                  detached per-token multipliers of the surrogate loss (0 masks a token).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pydantic
from torch import Tensor

from covey.plugins import NamedRegistry

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "CORRECTIONS",
    "KL_ESTIMATORS",
    "SURROGATES",
    "AdvantageResult",
    "BatchTotals",
    "Component",
    "ComponentError",
    "CorrectionInputs",
    "LossInputs",
    "Registry",
]


class ComponentError(ValueError):
    """Unknown component name, bad import path, or bad parameters."""


# ---------------------------------------------------------------------------- axis records
class AdvantageResult(NamedTuple):
    advantages: Tensor  # [N] or [N, T] float32
    metrics: dict[str, float]
    sample_mask: Tensor | None = None  # [N] or [N, T] float32, 0 = row (token) excluded from the loss


@dataclass
class LossInputs:
    """What a surrogate sees. All [N, T]; `advantages` already broadcast to tokens."""

    logp: Tensor  # current policy, carries gradient
    old_logp: Tensor  # pi_old (or proximal policy), no gradient
    advantages: Tensor
    mask: Tensor  # float 0/1
    entropy: Tensor | None = None  # current-policy token entropy, where a method needs it


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


# ---------------------------------------------------------------------------- components
@dataclass(frozen=True)
class Component:
    name: str
    fn: Callable[..., Any]
    axis: str
    paper: str = ""
    arxiv: str = ""
    summary: str = ""
    requires: tuple[str, ...] = ()  # optional Rollouts fields the component reads, e.g. ("ref_logprobs",)
    params_model: type[pydantic.BaseModel] = field(default=None, repr=False)
    group_relative: bool = False  # advantages are zero for groups of one sample (warned at config time)

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: f.default for k, f in self.params_model.model_fields.items()}

    def validate_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Check names and types of `params` against the function's keyword-only arguments."""
        allowed = list(self.params_model.model_fields)
        unknown = [k for k in params if k not in allowed]
        if unknown:
            raise ComponentError(
                f"{self.axis} {self.name!r} has no parameter {unknown[0]!r}; "
                f"its parameters are {allowed or 'none'}"
            )
        try:
            model = self.params_model(**params)
        except pydantic.ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            raise ComponentError(f"{self.axis} {self.name!r} parameter {key!r}: {err['msg']} (got {err.get('input')!r})") from None
        return {k: getattr(model, k) for k in params}

    def bind(self, params: Mapping[str, Any] | None = None) -> Callable[..., Any]:
        """The function with validated parameters bound."""
        kwargs = self.validate_params(params or {})
        fn = self.fn

        check = _RETURNS.get(self.axis)

        def bound(*args, **kw):
            out = fn(*args, **kwargs, **kw)
            problem = check(out, args) if check is not None else None
            if problem:
                raise ComponentError(f"{self.axis} {self.name!r} returned {problem}; it must return {_RETURN_DOC[self.axis]}")
            return out

        bound.__name__ = self.name
        bound.component = self  # type: ignore[attr-defined]
        return bound


def _params_model(name: str, fn: Callable) -> type[pydantic.BaseModel]:
    """A pydantic model of `fn`'s keyword-only parameters (each needs a default; NaN/inf refused).
    An annotation that cannot be evaluated at run time (a `TYPE_CHECKING` import) accepts any value."""
    fields = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if p.default is inspect.Parameter.empty:
            raise ComponentError(f"component {name!r}: keyword-only parameter {p.name!r} needs a default "
                                 f"(its parameters are configured by name, e.g. {p.name}: ...)")  # fmt: skip
        ann = p.annotation if p.annotation is not inspect.Parameter.empty else Any
        if isinstance(ann, str):  # from __future__ annotations
            try:
                ann = eval(ann, getattr(fn, "__globals__", {}))  # noqa: S307 - the component's own annotation
            except Exception:  # noqa: BLE001 - a name only a type checker can see
                ann = Any
        fields[p.name] = (ann, p.default)
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True, allow_inf_nan=False)
    return pydantic.create_model(f"{name}_params", __config__=config, **fields)


class Registry(NamedRegistry):
    """A read-only name -> Component mapping for one axis; filled only through `register`."""

    def __init__(self, axis: str, signature: str):
        self.axis = axis
        self.signature = signature
        self._items: dict[str, Component] = {}

    def register(
        self, name: str, *, paper: str = "", arxiv: str = "", requires: tuple[str, ...] = (), group_relative: bool = False
    ) -> Callable[[Callable], Callable]:
        """Decorator. `requires` names optional `Rollouts` fields the trainer must fill for this
        component (e.g. "ref_logprobs", "entropies"), so no trainer code branches on method names."""
        def deco(fn: Callable) -> Callable:
            if name in self._items:
                raise ComponentError(f"{self.axis} {name!r} is registered twice")
            summary = (inspect.getdoc(fn) or "").split("\n", 1)[0]
            self._items[name] = Component(
                name, fn, self.axis, paper, arxiv, summary, tuple(requires), _params_model(name, fn), group_relative
            )
            return fn

        return deco

    def get(self, name: str) -> Component:  # type: ignore[override]
        """Look up a registered name or import ``package.module:function``."""
        if name in self._items:
            return self._items[name]
        if ":" in name:
            return self._from_import_path(name)
        known = ", ".join(sorted(self._items))
        raise ComponentError(
            f"unknown {self.axis} {name!r}. Known: {known}. "
            f"Or give an import path 'package.module:function' with signature {self.signature}"
        )

    def _from_import_path(self, path: str) -> Component:
        from covey.plugins import PluginError, import_object

        try:
            fn = import_object(path, self.axis)
        except PluginError as e:
            raise ComponentError(str(e)) from None
        if not callable(fn):
            raise ComponentError(f"{self.axis} {path!r} is a {type(fn).__name__}, not a function")
        self._check_signature(path, fn)
        summary = (inspect.getdoc(fn) or "").split("\n", 1)[0]
        requires = tuple(getattr(fn, "requires", ()))  # attributes of the function, like register's arguments
        group_relative = bool(getattr(fn, "group_relative", False))
        return Component(path, fn, self.axis, "", "", summary, requires, _params_model(path, fn), group_relative)

    def _check_signature(self, path: str, fn: Callable) -> None:
        """An import-path component must take this axis's inputs positionally and its parameters as
        keyword-only arguments with defaults (checked at config time, before any model loads)."""
        try:
            ps = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return
        positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in ps)
        want = _INPUTS[self.axis]
        required = [p for p in positional if p.default is p.empty]
        if (len(positional) < want and not varargs) or len(required) > want:
            raise ComponentError(
                f"{self.axis} {path!r} has signature {inspect.signature(fn)}, but a {self.axis} is called as "
                f"{self.signature}: it takes {want} positional input(s), then keyword-only parameters with defaults"
            )



_INPUTS = {"advantage": 1, "surrogate": 1, "aggregation": 3, "kl": 2, "correction": 1}


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
    """(tensor shaped like `like(args)`, metrics dict): surrogates and corrections."""

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
    if isinstance(x, Tensor) and x.dim() == 0:
        return None
    return f"a {type(x).__name__}" + (f" of shape {_shape(x)}" if isinstance(x, Tensor) else "")


def _kl(x, args) -> str | None:
    ref = args[0] if args and isinstance(args[0], Tensor) else None
    return _tensor_like("kl_tok", x, None if ref is None else _shape(ref)) if isinstance(x, Tensor) else f"a {type(x).__name__}"


_RETURNS: dict[str, Callable[[Any, tuple], str | None]] = {
    "advantage": _advantage,
    "surrogate": _pair("loss_tok", lambda args: getattr(args[0], "logp", None) if args else None),
    "correction": _pair("weight_tok", lambda args: getattr(args[0], "mask", None) if args else None),
    "aggregation": _scalar,
    "kl": _kl,
}
_RETURN_DOC = {
    "advantage": "AdvantageResult(advantages [N] or [N,T] tensor, metrics dict, sample_mask or None)",
    "surrogate": "(loss_tok [N,T] tensor, metrics dict)",
    "correction": "(weight_tok [N,T] tensor, metrics dict)",
    "aggregation": "a scalar (0-dim) tensor",
    "kl": "a [N,T] tensor",
}

ADVANTAGES = Registry("advantage", "fn(batch: Rollouts, *, **params) -> AdvantageResult")
SURROGATES = Registry("surrogate", "fn(inp: LossInputs, *, **params) -> (loss_tok[N,T], metrics)")
AGGREGATIONS = Registry("aggregation", "fn(loss_tok[N,T], mask[N,T], totals: BatchTotals, *, **params) -> scalar")
KL_ESTIMATORS = Registry("kl", "fn(logp[N,T], ref_logp[N,T], *, **params) -> kl_tok[N,T]")
CORRECTIONS = Registry("correction", "fn(inp: CorrectionInputs, *, **params) -> (weight_tok[N,T], metrics)")

register_advantage = ADVANTAGES.register
register_surrogate = SURROGATES.register
register_aggregation = AGGREGATIONS.register
register_kl = KL_ESTIMATORS.register
register_correction = CORRECTIONS.register
