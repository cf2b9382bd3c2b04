"""Which sampler, rollout strategy and advantage estimator go together: checked when the config is read
(`covey config show`, and `covey train` before any model loads).

Each component declares what it needs from the others and what it adds to a batch:

    rollout strategies, samplers:  class attributes `requires`, `provides` (and `prefers`): sets of
                                   feature names; a sampler's `provides` may also be a function of
                                   its parameters (`spo`: single rows only when n = 1)
    advantage estimators:          `requires` (the registry's, `register_advantage(requires=...)`)
                                   and `group_relative`: a group-relative estimator needs groups of
                                   two rows or more (unless its `singleton: raw`) and provides
                                   `group_relative`

A requirement "x" needs some component of the run to provide x; "!x" needs none to. `dynamic`'s
requirements apply to the strategy it wraps. A missing `requires` is a contradiction: the config is
refused by name (what needs what, who provides it). A missing `prefers` wastes compute: a warning.
The trainer itself provides `ref_logprobs`, `entropies` and `old_logprobs`.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["FEATURES", "check_combination", "features_of"]

FEATURES = {
    "tree_path": "each row's path in a rollout tree",
    "segment_tokens": "the tree's segment length, Rollouts.segment_tokens",
    "tppo_advantages": "Extended-GAE advantages from the tppo value head, Rollouts.token_advantages",
    "spo_baseline": "the spo sampler's per-prompt value baseline, Rollouts.baseline",
    "single_rows": "every group holds one row",
    "group_relative": "a group-relative advantage estimator",
}
TRAINER = frozenset({"ref_logprobs", "entropies", "old_logprobs"})


def features_of(component: Any, attr: str, params: dict[str, Any]) -> set[str]:
    """A component's declared `requires` / `provides` / `prefers` (a set, or a function of its params)."""
    value = getattr(component, attr, ())
    if callable(value):
        value = value(params)
    return set(value or ())


def check_combination(cfg) -> list[str]:
    """Refuse (ValueError) a run whose sampler, strategy and advantage contradict each other; return
    (and log) warnings for combinations that waste compute."""
    from covey.algos.registry import ADVANTAGES
    from covey.likelihood.checks import check_family
    from covey.samplers import SAMPLERS
    from covey.strategies import STRATEGIES

    check_family(cfg)  # model.family x engine x likelihood x sampling (masked diffusion: docs/diffusion.md)
    sampler = cfg.sampler_spec()
    strategy = cfg.strategy_spec()
    parts: list[tuple[str, str, Any, dict[str, Any]]] = [("sampler", sampler.name, SAMPLERS.get(sampler.name).fn, sampler.params)]
    parts.append(("rollout.strategy", strategy.name, STRATEGIES.get(strategy.name).fn, strategy.params))
    wraps = getattr(parts[-1][2], "inner_strategy", None)  # dynamic: its own needs apply to what it wraps
    if wraps is not None:
        inner, inner_params = wraps(strategy.params)
        parts.append(("rollout.strategy", f"{strategy.name}(inner={inner})", STRATEGIES.get(inner).fn, inner_params))
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
    warnings: list[str] = []
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
    names = [f"rollout.strategy {n}" for n in STRATEGIES if need in features_of(STRATEGIES.get(n).fn, "provides", {})]
    names += [f"sampler {n}" for n in SAMPLERS if need in features_of(SAMPLERS.get(n).fn, "provides", {})]
    return "provided by " + (", ".join(names) if names else "no registered component")


def _waste(name: str, want: str) -> str:
    if want == "group_relative":
        return ("its filter drops groups whose rewards are all equal, which carry signal under this estimator: "
                "the rounds that generated them are wasted")  # fmt: skip
    return f"it works best with {FEATURES.get(want, want)}"
