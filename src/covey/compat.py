"""Which sampler, rollout strategy and advantage estimator go together: checked when the config is read
(`covey config show`, and `covey train` before any model loads).

Each component declares what it needs from the others and what it adds to a batch:

    rollout strategies:            `StrategyCaps.requires`, `.provides` (and `.prefers`) on the
                                   registry entry (`covey.strategies.base`)
    samplers:                      `BaseSampler.requires`, `.provides` (and `.prefers`) class attributes
                                   feature names, or for `provides` a function of the parameters
                                   (`spo`: single rows only when n = 1)
    advantage estimators:          `requires` (the registry's, `register_advantage(requires=...)`)
                                   and `group_relative`: a group-relative estimator needs groups of
                                   two rows or more (unless its `singleton: raw`) and provides
                                   `group_relative`

Reward columns a component reads by name (a parameter whose name ends in `_column`, e.g. dagrpo's
`score_column`, trpa's `level_column`) must be columns of the run: `check_column_params`.

A requirement "x" needs some component of the run to provide x; "!x" needs none to. A wrapping
strategy's requirements apply to the strategy it wraps (`StrategyCaps.inner`). A missing `requires` is a contradiction: the config is
refused by name (what needs what, who provides it). A missing `prefers` wastes compute: a warning.
The trainer itself provides the fields of `covey.learner.fillers.FILLERS` (`ref_logprobs`, `sum_p2`,
`probe_logprobs`, `entropies`, `old_logprobs`).
"""

from __future__ import annotations

import logging
from typing import Any

from covey.learner.fillers import FILLERS

__all__ = ["FEATURES", "check_algo", "check_column_params", "check_combination", "check_engine_config", "features_of"]

FEATURES = {
    "tree_path": "each row's path in a rollout tree",
    "segment_tokens": "the tree's segment length, Rollouts.segment_tokens",
    "tppo_advantages": "Extended-GAE advantages from the tppo value head, Rollouts.token_advantages",
    "spo_chain_advantages": "SPO-chain segment advantages from Monte-Carlo cut-point values, Rollouts.token_advantages",
    "spo_baseline": "the spo sampler's per-prompt value baseline, Rollouts.baseline",
    "probe_temperature": "an entropy controller's probe temperature, Rollouts.controller (rollout.strategy dcpo)",
    "reinforce_rows": "AEPO's REINFORCE rows at the controller's temperature, Rollouts.fixed_advantage",
    "single_rows": "every group holds one row",
    "greedy_first": "the first row of each group decoded greedily (rollout.strategy {name: group, greedy_first: true})",
    "group_relative": "a group-relative advantage estimator",
    "roles": "a game of two roles or more (an env that declares its roles, played by rollout.strategy selfplay)",
}
TRAINER = frozenset(FILLERS)


def features_of(entry: Any, attr: str, params: dict[str, Any]) -> set[str]:
    """The `requires` / `provides` / `prefers` a strategy or sampler registry entry declares (its
    `StrategyCaps`, or its `BaseSampler` class attributes), evaluated for `params` when it is a function."""
    from covey.samplers import BaseSampler
    from covey.strategies.base import StrategyCaps

    if isinstance(entry.caps, StrategyCaps):
        declares = entry.caps
    else:  # a sampler: what its class declares (a factory that is no BaseSampler subclass declares nothing)
        declares = entry.fn if isinstance(entry.fn, type) and issubclass(entry.fn, BaseSampler) else BaseSampler
    value = {"requires": declares.requires, "provides": declares.provides, "prefers": declares.prefers}[attr]
    if callable(value):
        value = value(params)
    return set(value or ())


def check_objective(cfg) -> None:
    """Refuse (ValueError) an `algo.objective` with bad parameters, or a run it declares it cannot train
    (`ObjectiveCaps.check_run`); with a preference section there is already an objective. A rollout
    strategy whose rows need an objective (`StrategyCaps.objective`) gets it or is refused."""
    from covey.strategies.base import strategy_chain

    spec = cfg.algo.objective
    for name, _, entry in strategy_chain(cfg.strategy_spec().name, cfg.strategy_spec().params):
        need = entry.caps.objective
        if need is not None and (spec is None or spec.name != need):
            have = f"algo.objective {spec.name!r}" if spec is not None else "the policy-gradient loss (no algo.objective)"
            raise ValueError(f"rollout.strategy {name!r} makes rows only algo.objective {need!r} trains, but the run has {have}: "
                             f"set algo.objective: {{name: {need}}}")  # fmt: skip
    if spec is None:
        return
    frozen = [name for name, _, entry in strategy_chain(cfg.strategy_spec().name, cfg.strategy_spec().params)
              if not entry.caps.updates_policy]  # fmt: skip
    if frozen:
        raise ValueError(f"algo.objective {spec.name!r} trains the policy, but rollout.strategy {frozen[0]!r} learns without "
                         "a weight update: drop algo.objective")  # fmt: skip
    import covey.objectives  # noqa: F401  (registers the built-in objectives)
    from covey.learner.objective import OBJECTIVES

    if getattr(cfg, "preference", None) is not None:
        raise ValueError(f"algo.objective {spec.name!r} and a preference section both choose what the learner trains: keep one")
    try:
        entry = OBJECTIVES.get(spec.name)
        spec.params.update(entry.validate_params(spec.params))
    except ValueError as e:
        raise ValueError(f"algo.objective: {e}") from None
    if entry.caps.check_run is not None:
        entry.caps.check_run(cfg)


def check_combination(cfg) -> list[str]:
    """Refuse (ValueError) a run whose sampler, strategy and advantage contradict each other; return
    (and log) warnings for combinations that waste compute."""
    from covey.algos.registry import ADVANTAGES
    from covey.family import check_family
    from covey.samplers import SAMPLERS
    from covey.strategies.base import strategy_chain

    check_family(cfg)  # model.family x engine x likelihood x sampling (masked diffusion: docs/diffusion.md)
    check_objective(cfg)  # algo.objective: its parameters and its own refusals
    warnings = check_algo(cfg)
    sampler = cfg.sampler_spec()
    strategy = cfg.strategy_spec()
    parts: list[tuple[str, str, Any, dict[str, Any]]] = [("sampler", sampler.name, SAMPLERS.get(sampler.name), sampler.params)]
    chain = strategy_chain(strategy.name, strategy.params)
    parts.append(("rollout.strategy", strategy.name, chain[0][2], strategy.params))
    if len(chain) > 1:  # a wrapper: its own needs apply to what it wraps (the next strategy)
        inner, inner_params, inner_entry = chain[1]
        parts.append(("rollout.strategy", f"{strategy.name}(inner={inner})", inner_entry, inner_params))
    adv = ADVANTAGES.get(cfg.algo.advantage.name)
    adv_params = {**adv.defaults, **cfg.algo.advantage.params}
    adv_requires = set(adv.requires) - TRAINER
    adv_provides = set()
    if adv.group_relative:
        adv_provides.add("group_relative")
        if adv_params.get("singleton", "zero") != "raw":
            adv_requires.add("!single_rows")
    parts.append(("algo.advantage", adv.name, None, adv_params))

    provided: dict[str, list[str]] = {}
    for key, name, comp, params in parts:
        got = adv_provides if comp is None else features_of(comp, "provides", params)
        for f in got:
            provided.setdefault(f, []).append(f"{key} {name!r}")
    for key, name, comp, params in parts:
        needs = adv_requires if comp is None else features_of(comp, "requires", params) - TRAINER
        for need in sorted(needs):
            problem = _missing(need, provided)
            if problem:
                raise ValueError(f"{key} {name!r} {problem}; {_fix(key, need)}")
        for want in sorted(features_of(comp, "prefers", params) if comp is not None else ()):
            problem = _missing(want, provided)
            if problem:
                msg = f"{key} {name!r} {problem}: {_waste(name, want)}"
                warnings.append(msg)
                logging.getLogger("covey").warning(msg)
    for spec in getattr(cfg, "rewards", None) or ():  # a reward may prefer a rollout (arenarl: a greedy anchor row)
        from covey.rewards.registry import REWARDS

        from covey.rewards.registry import reward_caps

        fn = REWARDS.get(spec.name).fn if spec.name in REWARDS else None
        for want in sorted(reward_caps(fn).prefers if fn is not None else ()):
            if _missing(want, provided):
                msg = f"rewards {spec.name!r} prefers {FEATURES.get(want, want)}, which nothing in this run provides"
                warnings.append(msg)
                logging.getLogger("covey").warning(msg)
    return warnings


def check_column_params(algo, columns: list[str]) -> None:
    """Refuse (ValueError) an active algorithm component whose `*_column` parameter is empty or names no
    reward column of the run (`columns`: the task's `accuracy`, the configured rewards, shaping terms)."""
    from covey.algos.presets import _AXES

    for axis, spec in algo.active().items():
        entry = _AXES[axis].get(spec.name)
        params = {**entry.defaults, **spec.params}
        for key in sorted(k for k in params if k.endswith("_column")):
            value = params[key]
            if not value:
                raise ValueError(f"algo.{axis} {spec.name!r} needs {key}: the name of a reward column (columns are "
                                 f"{columns})")  # fmt: skip
            if value not in columns:
                raise ValueError(f"algo.{axis} {spec.name!r}: {key}={value!r} is not a reward column (columns are {columns}); "
                                 f"add a reward with that name or alias (weight 0 if it only feeds {spec.name})")  # fmt: skip


def check_algo(cfg) -> list[str]:
    """Refuse (ValueError) algorithm choices that contradict each other or the optimisation settings;
    return (and log) warnings for terms that cannot act.

    * a surrogate without a clip names its trust region, a regularizer the config must list
      (`SurrogateCaps.trust_region`: r2vpo_provisional);
    * a regularizer that holds the entropy bonus (`RegularizerCaps.entropy_bonus`: epo) with
      algo.entropy_coef would count it twice;
    * a component that reads whole groups ("group") needs a micro-batch of at least one group;
    * a surrogate that declares the aggregation its scale assumes (`SurrogateCaps.aggregation`: disco, trpa)
      refuses others;
    * an advantage that is a loss's gradient at theta_old (`AdvantageCaps.exact_surrogate`: disco, trpa) is
      refused with several updates per batch unless the surrogate that recomputes that loss is chosen;
    * a trust region to pi_old (`RegularizerCaps.old_policy_trust_region`: disco_kl, kl_old,
      r2vpo_provisional, llds) with one update per batch compares the policy with itself: it never
      acts (a warning).
    """
    from covey.algos.regularizers import REGULARIZERS
    from covey.algos.registry import ADVANTAGES, SURROGATES

    algo = cfg.algo
    regs = [s.name for s in algo.regularizers]
    agg = SURROGATES.get(algo.surrogate.name).caps.aggregation
    if agg is not None and algo.aggregation.name != agg:
        raise ValueError(f"algo.surrogate {algo.surrogate.name!r} scales its per-row loss for aggregation {agg!r}; got "
                         f"algo.aggregation={algo.aggregation.name!r}: set algo.aggregation: {{name: {agg}}}")  # fmt: skip
    exact = ADVANTAGES.get(algo.advantage.name).caps.exact_surrogate
    updates = cfg.optim.epochs * cfg.optim.mini_batches
    if exact is not None and updates > 1 and algo.surrogate.name != exact:
        raise ValueError(f"algo.advantage {algo.advantage.name!r} is its loss's gradient at pi_old, exact for one update per "
                         f"batch; optim.epochs * optim.mini_batches = {updates}: set algo.surrogate: {{name: {exact}}} "
                         "(recomputes the loss on every mini-batch, as the released code does), or one update per batch")  # fmt: skip
    region = SURROGATES.get(algo.surrogate.name).caps.trust_region
    if region is not None and region not in regs:
        raise ValueError(f"algo.surrogate {algo.surrogate.name!r} is an unclipped ratio term whose trust region is the regularizer "
                         f"{region!r}: add algo.regularizers: [{{name: {region}}}] (or choose a clipped surrogate)")  # fmt: skip
    for n in regs:
        if REGULARIZERS.get(n).caps.entropy_bonus and algo.entropy_coef:
            raise ValueError(f"algo.regularizers {n!r} holds the entropy bonus (its coef); algo.entropy_coef={algo.entropy_coef} "
                             f"would add it a second time: set algo.entropy_coef to 0 (or drop {n})")  # fmt: skip
    group = cfg.rollout.group_size + algo.group_size_extra
    micro = cfg.optim.micro_batch_size
    if "group" in algo.requires() and micro is not None and micro < group:
        readers = [f"algo.surrogate {algo.surrogate.name!r}"] if "group" in SURROGATES.get(algo.surrogate.name).requires else []
        readers += [f"algo.regularizers {n!r}" for n in regs if "group" in REGULARIZERS.get(n).requires]
        raise ValueError(f"{' and '.join(readers) or 'a component'} reads whole groups, but optim.micro_batch_size={micro} is "
                         f"below the group size {group}: set optim.micro_batch_size >= {group} (or leave it unset)")  # fmt: skip
    warnings: list[str] = []
    idle = [n for n in regs if REGULARIZERS.get(n).caps.old_policy_trust_region]
    if idle and updates == 1:
        msg = (f"algo.regularizers {idle}: a term on pi_theta vs pi_old never acts with one update per batch "
               "(optim.epochs * optim.mini_batches = 1: the policy is pi_old); raise optim.mini_batches or optim.epochs")  # fmt: skip
        warnings.append(msg)
        logging.getLogger("covey").warning(msg)
    return warnings


def _missing(need: str, provided: dict[str, list[str]]) -> str | None:
    if need.startswith("!"):
        f = need[1:]
        if f in provided:
            return f"cannot work when {FEATURES.get(f, f)} ({f}: {' and '.join(provided[f])})"
        return None
    if need in provided:
        return None
    return f"needs {need} ({FEATURES.get(need, need)}), which nothing in this run provides"


def _fix(key: str, need: str) -> str:
    """What would satisfy a requirement: the components that provide a feature, or for '!single_rows'
    what avoids single-row groups."""
    from covey.algos.registry import ADVANTAGES
    from covey.samplers import SAMPLERS
    from covey.strategies import STRATEGIES

    if need == "!single_rows":
        if key == "algo.advantage":
            fixes = sorted(n for n in ADVANTAGES if not ADVANTAGES.get(n).group_relative)
            return (f"every advantage would be 0: choose an estimator that is not group-relative ({', '.join(fixes)}) "
                    "or a sampler/strategy that draws groups")  # fmt: skip
        return "dynamic sampling keeps only groups of two rows or more: turn off algo.dynamic_sampling (or drop dynamic)"
    names = [f"rollout.strategy {n}" for n in STRATEGIES if need in features_of(STRATEGIES.get(n), "provides", {})]
    names += [f"sampler {n}" for n in SAMPLERS if need in features_of(SAMPLERS.get(n), "provides", {})]
    return "provided by " + (", ".join(names) if names else "no registered component")


def _waste(name: str, want: str) -> str:
    if want == "group_relative":
        return ("its filter drops groups whose rewards are all equal, which carry signal under this estimator: "
                "the rounds that generated them are wasted")  # fmt: skip
    return f"it works best with {FEATURES.get(want, want)}"


def check_engine_config(cfg) -> None:
    """Raise ValueError (one line, starting "engine:") when engine `cfg.engine` cannot serve the run
    `cfg` (a `covey.train.config.RunConfig`): the engine's declared ``check_config(params, sampling,
    needs, device)`` (`EngineCaps`) sees its params, the `sampling:` section, the optional `Rollouts`
    fields the algorithm and sampler read (``"entropies"``, ...) and the device the run resolves to
    ("cpu", "cuda", "cuda:1"). Engines without the hook accept every run. An engine's optional
    ``check_lora(params, model.lora, runtime.executor, device)`` checks how it syncs a LoRA policy."""
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
