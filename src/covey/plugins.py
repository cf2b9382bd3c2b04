"""Registries for the runtime seams: samplers, rollout strategies, engines.

The algorithm axes (`covey.algos.registry`) register pure functions; the runtime seams register
*factories* of stateful objects (a class, or a function returning one). Configuration names a
plugin by its registered name or by an import path ``package.module:Name``, plus keyword
parameters; `build` checks the parameters against the factory's signature before anything heavy
runs, so a typo fails at config time with the allowed names.

    @SAMPLERS.register("uniform")
    class UniformSampler(PromptSampler):
        def __init__(self, items, *, seed=0): ...

    SAMPLERS.build("uniform", {}, items=items, seed=0)

A factory's first parameters (before ``*``) are the context the trainer passes (items, engine,
...); its keyword-only parameters are the user's, validated by `check_params`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["NamedRegistry", "PluginError", "PluginRegistry", "import_object"]


class PluginError(ValueError):
    """Unknown plugin, bad import path, wrong kind of object, or bad parameters."""


def _check_types(what: str, factory: Callable, params: Mapping[str, Any]) -> None:
    """Each value against its parameter's annotation (pydantic, lax: YAML's 1 passes for a float), so
    `dtype: bogus` against ``Literal["bf16", "fp32"]`` fails at config time. Unresolvable or missing
    annotations are not checked."""
    import typing

    from pydantic import TypeAdapter, ValidationError

    try:
        hints = typing.get_type_hints(factory.__init__ if inspect.isclass(factory) else factory)
    except Exception:  # forward references a plugin's module cannot resolve: nothing to check against
        return
    for key, value in params.items():
        hint = hints.get(key)
        if hint is None or hint is Any:
            continue
        try:
            TypeAdapter(hint).validate_python(value)
        except ValidationError as e:
            msg = e.errors()[0]["msg"]
            raise PluginError(f"{what}: parameter {key}={value!r}: {msg}") from None
        except Exception:  # an annotation pydantic cannot build a validator for (a plain class, a Protocol)
            continue


def import_object(path: str, what: str = "object") -> Any:
    """The attribute named by ``package.module:attr`` or ``path/to/file.py:attr`` (dots in attr
    walk nested attributes). A file is imported once under a name derived from its absolute path,
    so worker processes that resolve the same string get the same module."""
    module_name, sep, attr = path.rpartition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what} import path must look like 'package.module:Name' or 'file.py:Name', got {path!r}")
    try:
        module = _import_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except ImportError as e:
        raise PluginError(f"{what} {path!r}: cannot import module {module_name!r} ({e})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}")
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


class NamedRegistry(Mapping):
    """Read-only name -> entry mapping over `self._items`; `get` (which may also resolve import
    paths) is the lookup. Shared by these registries and the algorithm axes (`covey.algos.registry`)."""

    _items: dict

    def __getitem__(self, name: str):
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


class PluginRegistry(NamedRegistry):
    """name -> factory for one seam. `kind` names it in messages; `protocol` is the base class or
    Protocol every built object must satisfy (checked with isinstance after building)."""

    def __init__(self, kind: str, protocol: type, context: tuple[str, ...]):
        self.kind, self.protocol, self.context = kind, protocol, context
        self._items: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable:
        def deco(factory):
            if name in self._items and self._items[name] is not factory:
                raise PluginError(f"{self.kind} {name!r} is registered twice")
            if ":" in name:
                raise PluginError(f"{self.kind} names may not contain ':' (that marks an import path)")
            self._items[name] = factory
            return factory

        return deco

    def get(self, name: str) -> Callable[..., Any]:  # type: ignore[override]
        if name in self._items:
            return self._items[name]
        if ":" in name:
            obj = import_object(name, self.kind)
            if not callable(obj):
                raise PluginError(f"{self.kind} {name!r} is a {type(obj).__name__}, not a class or factory")
            return obj
        raise PluginError(
            f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._items))}; "
            f"or give an import path 'package.module:Name' (a {self.protocol.__name__})"
        )

    def check_params(self, name: str, params: Mapping[str, Any]) -> None:
        """Fail (naming the allowed parameters) when `params` do not fit the factory's keyword-only
        arguments, or when the factory does not take the context arguments this seam passes; a factory
        may add its own check as `check_ready(params)` raising PluginError (vllm: is it installed)."""
        factory = self.get(name)
        ready = getattr(factory, "check_ready", None)  # a plugin's own check (e.g. its package is installed)
        if callable(ready):
            ready(dict(params))
        try:
            sig = inspect.signature(factory)
        except (TypeError, ValueError):
            return
        ps = list(sig.parameters.values())
        if any(p.kind is p.VAR_KEYWORD for p in ps):
            return
        keyword = [p.name for p in ps if p.kind is p.KEYWORD_ONLY]
        unknown = sorted(set(params) - set(keyword))
        if unknown:
            raise PluginError(
                f"{self.kind} {name!r} has no parameter(s) {unknown}; its parameters: {', '.join(keyword) or 'none'}"
            )
        positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) < len(self.context) and not any(p.kind is p.VAR_POSITIONAL for p in ps):
            raise PluginError(
                f"{self.kind} {name!r} must accept the context argument(s) ({', '.join(self.context)}) before its "
                f"keyword-only parameters; its signature is {sig}"
            )
        required = [p.name for p in ps[len(self.context) :] if p.default is p.empty and p.kind is p.KEYWORD_ONLY]
        missing = sorted(set(required) - set(params))
        if missing:
            raise PluginError(f"{self.kind} {name!r} needs parameter(s) {missing}")
        _check_types(f"{self.kind} {name!r}", factory, params)

    def build(self, name: str, params: Mapping[str, Any], *context: Any) -> Any:
        """`factory(*context, **params)`, checked against the seam's protocol."""
        self.check_params(name, params)
        try:
            obj = self.get(name)(*context, **params)
        except TypeError as e:
            raise PluginError(f"{self.kind} {name!r}: bad parameters {sorted(params)} ({e})") from None
        if not isinstance(obj, self.protocol):
            raise PluginError(f"{self.kind} {name!r} built a {type(obj).__name__}, which is not a {self.protocol.__name__}")
        return obj

