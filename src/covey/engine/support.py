"""Which models an engine can generate with, checked from the model's config.json before anything loads.

An engine class says what it covers in its declared `EngineCaps.model_types` (config.json ``model_type``
values; None = any model). `check_model_support` reads the model's config.json without loading
weights (`covey.models.loading.model_config`: an alias, a local
folder or a hub id in the local HF cache; a hub id that is not cached is not checked here, the
engine checks it when it is built) and refuses an unsupported model in one line. The run
configuration (`covey.train.config.validate_config`) calls it, so `covey config show` and `covey
train` refuse the same models before a run folder is made or a model loads.

An engine's own check of the run's settings (``EngineCaps.check_config``) runs in
`covey.compat.check_engine_config`, with the other checks of one component against the rest of the run.

`engine_takes_dtype` says whether an engine's factory has a ``dtype`` parameter: the trainer then
gives it the learner's dtype (model.dtype) when ``engine.dtype`` is unset or ``auto``.
"""

from __future__ import annotations

__all__ = ["UnsupportedModel", "check_model_support", "engine_model_types", "engine_takes_dtype"]


class UnsupportedModel(ValueError):
    """The model's architecture is outside what the configured engine implements."""


def engine_model_types(engine: str) -> tuple[str, ...] | None:
    """The config.json ``model_type`` values engine `engine` (a registered name or an import path)
    supports, or None when it does not say (then every model is accepted)."""
    from covey.engine import ENGINES

    types = ENGINES.get(engine).caps.model_types
    return tuple(types) if types is not None else None


def engine_takes_dtype(engine: str) -> bool:
    """Whether engine `engine`'s factory has a ``dtype`` parameter (the trainer then passes the
    learner's dtype when the config leaves ``engine.dtype`` unset or ``auto``)."""
    import inspect

    from covey.engine import ENGINES

    try:
        return "dtype" in inspect.signature(ENGINES.get(engine).fn).parameters
    except (TypeError, ValueError):
        return False


def check_model_support(model: str, engine: str) -> None:
    """Raise `UnsupportedModel` when the config.json of `model` names a ``model_type`` that engine
    `engine` does not implement. Models whose config cannot be read without loading (a hub id that is
    not cached, a folder that does not exist) pass: `check_name` and the engine report those."""
    from covey.models.loading import model_config

    supported = engine_model_types(engine)
    if supported is None:
        return
    config = model_config(model)
    if config is None:
        return
    kind = config.get("model_type")
    if kind in supported:
        return
    raise UnsupportedModel(f"model {model!r} (model_type {kind}) is not supported by engine {engine!r}; "
                           f"supported: {', '.join(supported)}")  # fmt: skip
