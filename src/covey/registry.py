"""One registry mechanism for every kind of extension: samplers, rollout strategies, engines, tasks,
rewards and the five algorithm axes.

A `Registry` maps names to `Entry`s, filled by its `register` decorator. Configuration names an
entry by its registered name or by an import path (``package.module:attr`` or ``file.py:attr``),
so user code needs no covey edit. Every entry is a callable (a function or a class): its first
positional parameters are the *context* the caller passes (a sampler's items and seed, an
advantage estimator's batch, ...); the parameters after them are the user's, checked against the
signature (names, and values against their annotations with pydantic) when the config is read,
before any model loads.

    @SAMPLERS.register("vade")
    class VADESampler(BaseSampler):
        def __init__(self, items, seed=0, *, a0: float = 1.0, ...): ...

    SAMPLERS.build("vade", {"a0": 2.0}, items, seed)               # a built object
    ADVANTAGES.get("grpo").bind({"eps": 1e-6})(batch)              # a bound function

Every mistake is a `RegistryError` (a ValueError; the CLI prints it as ``error: ...``, exit 2).

What a component can do or needs beyond its parameters is declared on its entry as a small typed
model, the registry's `Caps` subclass (a strategy: the engine protocols it needs, whether it carries
rollouts across steps, ...; an engine: its model family, its config checks; a surrogate: whether a
zero advantage makes it zero). A component declares it as its `caps` attribute (a class attribute,
or set on a function) or passes it to ``register(name, caps=...)``; nothing declared means the model's
defaults. Config checks read ``REGISTRY.get(name).caps``, and `covey list` shows what differs from
the defaults.

`Spec` is the one configuration shape for a choice from a registry: `name` plus `params`. It reads
a bare string (``"grpo"``), flat keys (``{name: ppo_clip, eps_high: 0.28}``) and a nested
``params:`` mapping (``{name: length, params: {target: 4}}``); it always writes ``{name, params}``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Caps", "Entry", "Registry", "RegistryError", "Spec", "import_object"]


class RegistryError(ValueError):
    """Unknown name, bad import path, wrong kind of object, wrong signature, bad parameters, or a
    component that returned the wrong thing."""


# ---------------------------------------------------------------------------- import paths
def import_object(path: str, what: str = "object") -> Any:
    """The attribute named by ``package.module:attr`` or ``path/to/file.py:attr`` (dots in attr
    walk nested attributes). A file is imported once under a name derived from its absolute path,
    so worker processes that resolve the same string get the same module."""
    module_name, sep, attr = path.rpartition(":")
    if not sep or not module_name or not attr:
        raise RegistryError(f"{what} import path must look like 'package.module:Name' or 'file.py:Name', got {path!r}")
    try:
        module = _import_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except ImportError as e:
        raise RegistryError(f"{what} {path!r}: cannot import module {module_name!r} ({e})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RegistryError(f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _import_file(file: str):
    p = Path(file).expanduser().resolve()
    if not p.is_file():
        raise ImportError(f"no such file {str(p)!r}")
    name = "covey_user_" + hashlib.sha1(str(p).encode()).hexdigest()[:12] + "_" + p.stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pickling by reference finds it
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ImportError(f"{p} raised {type(e).__name__}: {e}") from e
    return module


# ---------------------------------------------------------------------------- entries
_CONFIG = ConfigDict(extra="forbid", arbitrary_types_allowed=True, allow_inf_nan=False)


class Caps(BaseModel):
    """The capabilities every kind can declare (each registry extends it with its own fields).

    check_ready:  check_ready(params) raising RegistryError, run before the parameters are validated
                  (an optional dependency is missing: vllm)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    renamed: ClassVar[dict[str, str]] = {}  # old attribute name -> field, for the deprecated spelling

    check_ready: Callable[[dict], None] | None = None

    def declared(self) -> dict[str, Any]:
        """The fields that differ from the defaults (what `covey list` shows)."""
        return {k: v for k, v in self if v != type(self).model_fields[k].default}


def _annotation(p: inspect.Parameter, owner: Callable) -> Any:
    """The parameter's annotation as an object pydantic can validate against, else Any (a name only
    a type checker can see, a Protocol, anything pydantic cannot build a validator for)."""
    ann = p.annotation
    if ann is inspect.Parameter.empty:
        return Any
    if isinstance(ann, str):  # from __future__ import annotations
        target = owner.__init__ if inspect.isclass(owner) else owner
        try:
            ann = eval(ann, getattr(target, "__globals__", {}))  # noqa: S307 - the entry's own annotation
        except Exception:  # noqa: BLE001
            return Any
    try:
        pydantic.TypeAdapter(ann, config=_CONFIG if not _is_model(ann) else None)
    except Exception:  # noqa: BLE001
        return Any
    return ann


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


@dataclass(frozen=True)
class Entry:
    """One registered (or imported) callable with what `covey list` shows about it."""

    name: str
    fn: Callable[..., Any]  # a function or a class
    kind: str
    summary: str = ""  # the first line of its docstring
    paper: str = ""
    arxiv: str = ""
    requires: tuple[str, ...] = ()  # optional Rollouts fields it reads, e.g. ("ref_logprobs",)
    group_relative: bool = False  # advantages are zero for groups of one sample (warned at config time)
    registry: Registry = field(default=None, repr=False, compare=False)
    given_caps: Any = field(default=None, repr=False, compare=False)  # register(..., caps=...)

    @functools.cached_property
    def caps(self) -> Caps:
        """The component's declared capabilities, an instance of the registry's `Caps` model (module
        docstring): `register(..., caps=...)`, else the component's `caps` attribute, else defaults.
        Read when first needed, so a `caps` set after the class or function is defined counts."""
        model = self.registry.caps if self.registry is not None else Caps
        declared = self.given_caps if self.given_caps is not None else getattr(self.fn, "caps", None)  # the one declared attribute
        if declared is None:
            declared = _attribute_caps(self, model)
        if declared is None:
            return model()
        if isinstance(declared, Mapping):
            try:
                return model(**declared)
            except pydantic.ValidationError as e:
                raise RegistryError(f"{self.kind} {self.name!r}: bad caps ({e.errors()[0]['msg']})") from None
        if not isinstance(declared, model):
            raise RegistryError(f"{self.kind} {self.name!r} declares caps of type {type(declared).__name__}; a {self.kind} "
                                f"declares {model.__name__}")  # fmt: skip
        return declared

    # ------------------------------------------------------------------ parameters
    def _signature(self) -> list[inspect.Parameter] | None:
        try:
            return list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            return None

    def _user_params(self) -> list[inspect.Parameter] | None:
        """The parameters after the context (None: anything goes, a ``**kwargs`` or no signature)."""
        ps = self._signature()
        if ps is None or any(p.kind is p.VAR_KEYWORD for p in ps):
            return None
        n = len(self.registry.context)
        positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return [p for p in positional[n:] if p.kind is not p.POSITIONAL_ONLY] + [p for p in ps if p.kind is p.KEYWORD_ONLY]

    @functools.cached_property
    def params_model(self) -> type[BaseModel] | None:
        """A pydantic model of the user parameters (None when the entry takes ``**kwargs``)."""
        ps = self._user_params()
        if ps is None:
            return None
        fields = {p.name: (_annotation(p, self.fn), ... if p.default is p.empty else p.default) for p in ps}
        return pydantic.create_model(f"{self.name}_params", __config__=_CONFIG, **fields)

    @property
    def defaults(self) -> dict[str, Any]:
        """Each user parameter's default (the documented defaults); parameters without one are left out."""
        return {p.name: p.default for p in self._user_params() or () if p.default is not p.empty}

    def validate_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` checked against the user parameters (unknown names, missing required ones, types,
        NaN/inf); returns them with pydantic's coercions applied (YAML's 1 for a float -> 1.0). A
        factory may add its own check as `check_ready(params)` raising RegistryError (vllm: is vLLM
        installed), run first."""
        if self.caps.check_ready is not None:
            self.caps.check_ready(dict(params))
        ps = self._user_params()
        if ps is None:
            return dict(params)
        allowed = [p.name for p in ps]
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise RegistryError(f"{self.kind} {self.name!r} has no parameter(s) {unknown}; its parameters: {', '.join(allowed) or 'none'}")
        missing = sorted(p.name for p in ps if p.default is p.empty and p.name not in params)
        if missing:
            raise RegistryError(f"{self.kind} {self.name!r} needs parameter(s) {missing}")
        try:
            model = self.params_model(**params)
        except pydantic.ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            raise RegistryError(f"{self.kind} {self.name!r} parameter {key!r}: {err['msg']} (got {err.get('input')!r})") from None
        return {k: getattr(model, k) for k in params}

    # ------------------------------------------------------------------ use
    def bind(self, params: Mapping[str, Any] | None = None) -> Callable[..., Any]:
        """The callable with validated parameters bound; its return value is checked on each call
        when the registry has a return check (the algorithm axes)."""
        kwargs = self.validate_params(params or {})
        fn, check, entry = self.fn, self.registry.returns, self

        def bound(*args, **kw):
            out = fn(*args, **kwargs, **kw)
            problem = check(out, args) if check is not None else None
            if problem:
                raise RegistryError(f"{entry.kind} {entry.name!r} returned {problem}; it must return {entry.registry.returns_doc}")
            return out

        bound.__name__ = self.name
        bound.entry = self  # type: ignore[attr-defined]
        return bound

    def build(self, params: Mapping[str, Any], *context: Any) -> Any:
        """``fn(*context, **params)``, checked against the registry's protocol. The parameters are
        validated first but passed as given (objects such as a task's `rows` stay the same objects,
        and a class's own checks see the user's values)."""
        self.validate_params(params)
        try:
            obj = self.fn(*context, **params)
        except TypeError as e:
            raise RegistryError(f"{self.kind} {self.name!r}: bad parameters {sorted(params)} ({e})") from None
        protocol = self.registry.protocol
        if protocol is not None and not isinstance(obj, protocol):
            raise RegistryError(f"{self.kind} {self.name!r} built a {type(obj).__name__}, which is not a {protocol.__name__}")
        return obj


def _attribute_caps(entry: Entry, model: type[Caps]) -> dict[str, Any] | None:
    """Deprecated spelling, read for one more release: capabilities set as separate attributes of the
    component (``engine_protocols = (...)``, ``inner_strategy``, ``fn.zero_at_zero_advantage = True``)
    instead of one `caps`; a one-line warning names the component."""
    names = {**{f: f for f in model.model_fields}, **model.renamed}
    found = {field: getattr(entry.fn, attr) for attr, field in names.items() if attr != "caps" and hasattr(entry.fn, attr)}
    if not found:
        return None
    logging.getLogger("covey").warning(
        "%s %r declares %s as attributes, which is deprecated: declare `caps = %s(%s)` instead",
        entry.kind, entry.name, ", ".join(sorted(found)), model.__name__, ", ".join(f"{k}=..." for k in sorted(found)))
    return found


# ---------------------------------------------------------------------------- registries
class Registry(Mapping):
    """A read-only name -> `Entry` mapping for one kind, filled only through `register`.

    kind:          the word used in messages ("sampler", "advantage", ...).
    context:       names of the leading positional arguments the caller passes (documentation and
                   the signature check of import-path entries).
    protocol:      `build` checks the built object with isinstance (None: no check).
    caps:          the `Caps` model its entries declare (module docstring).
    signature:     how an entry is called, shown when a name is unknown or a signature is wrong.
    returns:       `returns(out, args) -> problem or None`, checked by `Entry.bind` on each call.
    defaults_required: every user parameter must have a default (the algorithm axes: a component's
                   defaults are its documented defaults).
    """

    def __init__(
        self,
        kind: str,
        *,
        context: tuple[str, ...] = (),
        protocol: type | None = None,
        signature: str = "",
        returns: Callable[[Any, tuple], str | None] | None = None,
        returns_doc: str = "",
        defaults_required: bool = False,
        caps: type[Caps] = Caps,
    ):
        self.kind, self.context, self.protocol, self.signature = kind, tuple(context), protocol, signature
        self.caps = caps
        self.returns, self.returns_doc, self.defaults_required = returns, returns_doc, defaults_required
        self._items: dict[str, Entry] = {}

    # ------------------------------------------------------------------ mapping
    def __getitem__(self, name: str) -> Entry:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    # ------------------------------------------------------------------ filling
    def register(
        self, name: str, *, paper: str = "", arxiv: str = "", requires: tuple[str, ...] = (), group_relative: bool = False,
        caps: Caps | None = None,
    ) -> Callable[[Callable], Callable]:
        """Decorator registering a function or class under `name`. `requires` names optional
        `Rollouts` fields the trainer must fill for it (e.g. "ref_logprobs"), so no trainer code
        branches on method names; `group_relative` marks estimators that give groups of one zero;
        `caps` declares its capabilities (module docstring)."""

        def deco(fn: Callable) -> Callable:
            if ":" in name:
                raise RegistryError(f"{self.kind} names may not contain ':' (that marks an import path), got {name!r}")
            if name in self._items and self._items[name].fn is not fn:
                raise RegistryError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = self._entry(name, fn, paper, arxiv, tuple(requires), group_relative, caps)
            return fn

        return deco

    def _entry(self, name, fn, paper="", arxiv="", requires=(), group_relative=False, caps=None) -> Entry:
        entry = Entry(name, fn, self.kind, _summary(fn), paper, arxiv, requires, group_relative, self, caps)
        self._check_context(entry)
        if self.defaults_required:
            for p in entry._user_params() or ():
                if p.default is p.empty:
                    raise RegistryError(f"{self.kind} {name!r}: parameter {p.name!r} needs a default "
                                        f"(parameters are configured by name, e.g. {p.name}: ...)")  # fmt: skip
        return entry

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> Entry:  # type: ignore[override]
        """A registered name, or an import path ``package.module:attr`` (checked against `context`)."""
        if name in self._items:
            return self._items[name]
        if ":" in name:
            return self._import(name)
        how = f" with signature {self.signature}" if self.signature else ""
        raise RegistryError(
            f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._items)) or 'none'}; "
            f"or give an import path 'package.module:Name'{how}"
        )

    def _import(self, path: str) -> Entry:
        fn = import_object(path, self.kind)
        if not callable(fn):
            raise RegistryError(f"{self.kind} {path!r} is a {type(fn).__name__}, not a function or class")
        return self._entry(path, fn, requires=tuple(getattr(fn, "requires", ())),
                           group_relative=bool(getattr(fn, "group_relative", False)))  # fmt: skip

    def _check_context(self, entry: Entry) -> None:
        """An entry must take the context positionally (and nothing else required positionally).
        Kinds without a context (tasks, rewards: called with keywords) have nothing to check here."""
        ps = entry._signature()
        if ps is None or not self.context:
            return
        positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in ps)
        want = len(self.context)
        required = [p for p in positional if p.default is p.empty]
        if (len(positional) < want and not varargs) or len(required) > want:
            sig = inspect.signature(entry.fn)
            raise RegistryError(
                f"{self.kind} {entry.name!r} has signature {sig}, but a {self.kind} is called as "
                f"{self.signature or self.kind + '(' + ', '.join(self.context) + ', *, **params)'}: it takes "
                f"{want} positional input(s) ({', '.join(self.context) or 'none'}), then keyword parameters"
            )

    def check_params(self, name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The validated parameters of `name` (see `Entry.validate_params`)."""
        return self.get(name).validate_params(params)

    def build(self, name: str, params: Mapping[str, Any], *context: Any) -> Any:
        """``entry(*context, **params)`` (see `Entry.build`)."""
        return self.get(name).build(params, *context)


def _summary(fn: Callable) -> str:
    return (inspect.getdoc(fn) or "").strip().split("\n", 1)[0]


# ---------------------------------------------------------------------------- configuration
class Spec(BaseModel):
    """A choice from a registry: `name` (registered, or an import path) and its `params`.

    Reads ``"name"``, ``{name: x, key: value, ...}`` (flat) and ``{name: x, params: {key: value}}``
    (nested; both at once are merged, a key given twice is an error). Keys that are declared fields
    of a subclass (a reward's weight, a task's split) are that field, never a parameter: such a
    parameter must go under ``params:``. Written back as ``{name, params, <fields>}``.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _one_shape(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        if not isinstance(value, Mapping):
            return value
        declared = set(cls.model_fields)
        flat = {k: v for k, v in value.items() if k not in declared}
        out = {k: v for k, v in value.items() if k in declared}
        if flat:
            nested = out.get("params") or {}
            if not isinstance(nested, Mapping):
                return value  # pydantic reports `params` as not a mapping
            both = sorted(set(flat) & set(nested))
            if both:
                raise ValueError(f"parameter(s) {both} given both as keys and under params")
            out["params"] = {**nested, **flat}
        return out
