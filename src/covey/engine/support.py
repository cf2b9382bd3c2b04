"""Which models an engine can generate with, checked from the model's config.json before anything loads.

An engine class says what it covers in its declared `EngineCaps.model_types` (config.json ``model_type``
values; None = any model). `check_model_support` reads the model's config.json without loading
weights (`covey.models.loading.model_config`: an alias, a local
folder or a hub id in the local HF cache; a hub id that is not cached is not checked here, the
engine checks it when it is built) and refuses an unsupported model in one line. The run
configuration (`covey.train.config.validate_config`) calls it, so `covey config show` and `covey
train` refuse the same models before a run folder is made or a model loads.

`check_engine_config` runs an engine class's own check of the run's settings, ``check_config(params,
sampling, needs, device)`` (declared in its `EngineCaps`, raising ValueError; vllm: truncated sampling, entropies),
so a combination the engine cannot serve is refused when the config is read, not at the first
`generate`.

`engine_takes_dtype` says whether an engine's factory has a ``dtype`` parameter: the trainer then
gives it the learner's dtype (model.dtype) when ``engine.dtype`` is unset or ``auto``.
"""

from __future__ import annotations

__all__ = ["UnsupportedModel", "check_engine_config", "check_model_support", "engine_model_types", "engine_takes_dtype"]


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


def check_engine_config(cfg) -> None:
    """Raise ValueError (one line, starting "engine:") when engine `cfg.engine` cannot serve the run
    `cfg` (a `covey.train.config.RunConfig`): the engine's declared ``check_config(params, sampling,
    needs, device)`` (`EngineCaps`) sees its params, the `sampling:` section, the optional `Rollouts`
    fields the algorithm and sampler read (``"entropies"``, ...) and the device the run resolves to
    ("cpu", "cuda", "cuda:1"). Engines without the hook accept every run. An engine's optional
    ``check_lora(params, model.lora, runtime.executor, device)`` checks how it syncs a LoRA policy."""
    from covey.compat import features_of
    from covey.engine import ENGINES
    from covey.samplers import SAMPLERS

    caps = ENGINES.get(cfg.engine.name).caps
    check, lora_check = caps.check_config, caps.check_lora  # vllm: lora_sync x model.lora
    if check is None:
        return
    sampler = cfg.sampler_spec()
    needs = set(cfg.algo.requires()) | features_of(SAMPLERS.get(sampler.name), "requires", sampler.params)
    try:
        check(dict(cfg.engine.params), cfg.sampling, needs, cfg.resolved_device())
        if lora_check is not None:
            lora_check(dict(cfg.engine.params), cfg.model.lora, cfg.runtime.executor, cfg.resolved_device())
    except ValueError as e:
        raise ValueError(f"engine: {e}") from None
