"""Which settings contradict the model family (`model.family`), checked when the config is read
(`covey.compat.check_combination`: `covey config show` and `covey train` refuse before a model loads).

A masked-diffusion model (docs/diffusion.md) needs: the family's engine (`engine: masked_diffusion`,
or an engine declaring `EngineCaps(family="masked_diffusion")`), a likelihood estimator (`algo.likelihood`,
which every diffusion preset sets), no entropies or logit statistics (the estimators give none;
regularizers that read them are refused, and any regularizer with the per-sample `bgpo` surrogate),
no internal-layer log-probs (`algo.logprob_source`), no importance
correction (the engine has no behaviour log-probs), full-distribution sampling (no top-p, top-k,
min-p) and no stop strings, and a canvas (`sampling.max_new_tokens`) that the engine's blocks and
steps divide. Tree and partial-rollout strategies need a forking engine, which the diffusion engine
is not: the engine-protocol check refuses them. Prompt KV sharing is never used for this family
(`covey.learner.prefix` refuses a bidirectional model). A causal model takes none of the family's
parts (likelihood, engine, per-sample surrogate). The model's own config.json decides when it can be
read (is_causal false, or model_type llada / Dream, is a masked-diffusion model).

A vision-language model (docs/vlm.md; config.json with a `vision_config`, or a model_type of
`covey.models.vision.VISION_TYPES`) needs an engine that takes images (`EngineCaps.takes_images`: torch,
vllm) and strategies that ask only generation of it (no tree forking or hidden states, which are not
built for VLMs), no internal-layer log-probs, and the inline or thread executor on one learner.
A text-only model is refused data whose prompts hold images (`check_data_family`, run with the data).
"""

from __future__ import annotations

__all__ = ["check_data_family", "check_family", "family_of"]

DIFFUSION = "masked_diffusion"
VISION = "vision_language"
_WHAT = {DIFFUSION: "a masked-diffusion model (bidirectional, with a mask token)", VISION: "a vision-language model",
         "causal": "a causal model"}  # fmt: skip


def family_of(config: dict | None) -> str | None:
    """The family a config.json dict describes (None when it cannot be told)."""
    from covey.models.diffusion import family_of_config
    from covey.models.vision import is_vision_config

    return VISION if is_vision_config(config) else family_of_config(config)


def _engine_family(name: str) -> str:
    from covey.engine import ENGINES

    return ENGINES.get(name).caps.family


def check_family(cfg) -> None:
    """ValueError (one line) when the run's settings contradict `cfg.model.family`."""
    from covey.algos import SURROGATES
    from covey.models.loading import model_config

    family = cfg.model.family
    actual = family_of(model_config(cfg.model.name))
    if actual is not None and actual != family:
        raise ValueError(f"model.family is {family!r} but model {cfg.model.name!r} is {_WHAT[actual]}: set model.family: {actual}")
    engine = _engine_family(cfg.engine.name)
    per_mc = SURROGATES.get(cfg.algo.surrogate.name).caps.per_mc
    if family != DIFFUSION:
        if cfg.algo.likelihood is not None:
            raise ValueError(f"algo.likelihood {cfg.algo.likelihood.name!r} estimates a masked-diffusion model's likelihood: "
                             "it needs model.family: masked_diffusion (a diffusion preset: diffu_grpo, espo, dlm_gdpo, bgpo)")  # fmt: skip
        if engine == DIFFUSION:
            raise ValueError(f"engine {cfg.engine.name!r} generates with masked-diffusion models; model.family is {family!r}")
        if per_mc:
            raise ValueError(f"algo.surrogate {cfg.algo.surrogate.name!r} works on Monte Carlo ELBO samples of a masked-diffusion model")
        if family == VISION:
            _check_vision(cfg)
        return
    if engine != DIFFUSION:
        raise ValueError(f"model.family masked_diffusion needs engine: masked_diffusion; engine {cfg.engine.name!r} decodes "
                         "autoregressively (a causal model)")  # fmt: skip
    if cfg.algo.likelihood is None:
        raise ValueError("model.family masked_diffusion needs algo.likelihood (d1_one_step, elbo_mc, elbo_antithetic, "
                         "elbo_sdmc), or a diffusion preset: diffu_grpo, espo, dlm_gdpo, bgpo")  # fmt: skip
    if cfg.algo.entropy_coef or "entropies" in SURROGATES.get(cfg.algo.surrogate.name).requires:
        raise ValueError("model.family masked_diffusion has no token entropies: set algo.entropy_coef: 0 and use a "
                         "surrogate that does not read entropies")  # fmt: skip
    if cfg.algo.logprob_source is not None:
        raise ValueError("algo.logprob_source reads log-probs at an internal layer of a causal model; model.family "
                         "masked_diffusion takes its log-probs from algo.likelihood: remove algo.logprob_source")  # fmt: skip
    from covey.algos.regularizers import REGULARIZERS

    for i, spec in enumerate(cfg.algo.regularizers):
        reads = sorted(f for f in REGULARIZERS.get(spec.name).requires if f == "entropies" or f.startswith("stat:"))
        if reads:
            raise ValueError(f"algo.regularizers[{i}] {spec.name!r} reads {', '.join(reads)} of the token distribution, which "
                             "model.family masked_diffusion does not have (algo.likelihood gives log-likelihood estimates only)")  # fmt: skip
        if per_mc:
            raise ValueError(f"algo.regularizers[{i}] {spec.name!r}: algo.surrogate {cfg.algo.surrogate.name!r} runs one "
                             "backward per Monte Carlo sample, which the regularizers do not: remove algo.regularizers")  # fmt: skip
    if cfg.algo.correction is not None:
        raise ValueError(f"algo.correction {cfg.algo.correction.name!r} compares with the engine's behaviour log-probs, "
                         "which a masked-diffusion engine does not have: remove algo.correction")  # fmt: skip
    s = cfg.sampling
    if s.top_p != 1.0 or s.top_k or s.min_p:
        raise ValueError("model.family masked_diffusion samples the full distribution (Gumbel-max): leave sampling.top_p, "
                         "top_k and min_p at their defaults")  # fmt: skip
    if s.stop_strings:
        raise ValueError("model.family masked_diffusion: sampling.stop_strings is not supported (the canvas is not "
                         "generated left to right)")  # fmt: skip
    if cfg.engine.name == DIFFUSION:
        from covey.engine.diffusion import canvas_plan

        try:
            canvas_plan(s.max_new_tokens, cfg.engine.params.get("block_length"), cfg.engine.params.get("steps"))
        except ValueError as e:
            raise ValueError(f"engine: {e}") from None


def _check_vision(cfg) -> None:
    """What a vision-language policy needs of the rest of the run (module docstring)."""
    from covey.engine import ENGINES
    from covey.engine.base import ENGINE_PROTOCOLS, Engine, InterruptibleEngine, TemperatureRuleEngine
    from covey.strategies.base import engine_protocols

    if not ENGINES.get(cfg.engine.name).caps.takes_images:
        raise ValueError(f"model.family vision_language needs an engine that takes images (torch, vllm); engine "
                         f"{cfg.engine.name!r} does not (EngineCaps.takes_images)")  # fmt: skip
    spec = cfg.strategy_spec()
    other = [p for p in engine_protocols(spec.name, spec.params) if p not in (Engine, InterruptibleEngine, TemperatureRuleEngine)]
    if other:
        raise ValueError(f"rollout.strategy {spec.name!r} needs {ENGINE_PROTOCOLS[other[0]]} of the engine, which covey does not "
                         "build for vision-language models: use a strategy that only generates (group, dynamic, ...)")  # fmt: skip
    if cfg.algo.logprob_source is not None:
        raise ValueError("algo.logprob_source reads log-probs at an internal layer of a text-only causal LM; it is not "
                         "built for model.family vision_language")  # fmt: skip
    if cfg.runtime.executor == "ray":
        raise ValueError("model.family vision_language runs with runtime.executor inline or thread (the Ray engine and "
                         "learner actors are not built for images)")  # fmt: skip


def check_data_family(family: str, items, split: str) -> None:
    """ValueError (one line) when a text-only policy is given prompts with images."""
    from covey.models.vision import prompt_images

    if family == VISION:
        return
    row = next((i for i, item in enumerate(items) if prompt_images(item.get("prompt"))), None)
    if row is not None:
        raise ValueError(f"the {split} split has images in its prompts (item {items[row].get('id', row)}) but model.family is "
                         f"{family!r}: a text-only model cannot read them; use a vision-language model (model.family: "
                         "vision_language, e.g. model.name: tiny-qwen2-vl; docs/vlm.md)")  # fmt: skip
