"""The `preference:` section of a run config, and the combinations it refuses when the config is read."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from covey.registry import RegistryError, Spec

__all__ = ["PreferenceConfig", "check_preference"]


class PrefLossSpec(Spec):
    """`covey.preference.PREFERENCE_LOSSES`: dpo (default; loss_type sigmoid / hinge / ipo), xpo, tgdpo, gepo_provisional."""

    name: str = "dpo"


class PairsSpec(Spec):
    """`covey.preference.PAIRS`: best_worst (default), all_pairs, rso, sets, xpo."""

    name: str = "best_worst"


class PreferenceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    loss: PrefLossSpec = PrefLossSpec()
    """The preference loss."""
    pairs: PairsSpec = PairsSpec()
    """Which rows of a step's groups form the pairs (or sets) the loss compares."""
    guide_model: str | None = Field(None, min_length=1)
    """TGDPO's guidance model (a model name or folder, loaded like `model.name`), frozen."""


_NEEDS_PAIRS = {"xpo": "xpo", "gepo_provisional": "sets"}


def check_preference(pref: PreferenceConfig, algo_is_default: bool, strategy: str, rewards: list) -> None:
    """ValueError (one line) for a contradictory preference setup."""
    from covey.preference import PAIRS, PREFERENCE_LOSSES

    for key, registry, spec in (("preference.loss", PREFERENCE_LOSSES, pref.loss), ("preference.pairs", PAIRS, pref.pairs)):
        try:
            registry.check_params(spec.name, spec.params)
        except RegistryError as e:
            raise ValueError(f"{key}: {e}") from None
    if not algo_is_default:
        raise ValueError("preference: the preference loss replaces the RL objective, so `algo` (advantage, surrogate, KL, "
                         "corrections) would be ignored: remove `algo` from the config")  # fmt: skip
    loss, pairs = pref.loss.name, pref.pairs.name
    want = _NEEDS_PAIRS.get(loss)
    if want is not None and pairs != want:
        raise ValueError(f"preference.loss {loss!r} needs preference.pairs {want!r}, got {pairs!r}")
    for other, p in _NEEDS_PAIRS.items():
        if pairs == p and loss != other:
            raise ValueError(f"preference.pairs {pairs!r} builds units only preference.loss {other!r} reads, got {loss!r}")
    if (loss == "tgdpo") != (pref.guide_model is not None):
        raise ValueError("preference.loss tgdpo needs preference.guide_model (and only tgdpo reads one)")
    caps = _strategy_caps(strategy)
    if pairs == "xpo" and not caps.needs_reference_engine:
        samplers = ", ".join(n for n in _pair_strategies() if _strategy_caps(n).needs_reference_engine)
        raise ValueError(f"preference.pairs xpo pairs policy samples with reference samples: use rollout.strategy {samplers}")
    if caps.labelled_reward is not None and rewards:
        raise ValueError(f"rollout.strategy {strategy}: the dataset labels the pairs (chosen / rejected), so `rewards:` "
                         "would be ignored: remove them")  # fmt: skip
    if caps.needs_reference_engine and pairs != "xpo":
        raise ValueError(f"rollout.strategy {strategy} draws reference samples only preference.pairs xpo uses, got {pairs!r}")


def _strategy_caps(name: str):
    from covey.strategies import STRATEGIES

    return STRATEGIES.get(name).caps


def _pair_strategies() -> list[str]:
    """The rollout strategies that make preference pairs (`StrategyCaps.makes_pairs`)."""
    from covey.strategies import STRATEGIES

    return [n for n in STRATEGIES if STRATEGIES.get(n).caps.makes_pairs]


def no_preference_strategy(strategy: str, preference: Any) -> None:
    """The strategies that make preference pairs (`StrategyCaps.makes_pairs`) need a `preference:` section."""
    if preference is None and _strategy_caps(strategy).makes_pairs:
        raise ValueError(f"rollout.strategy {strategy} makes preference pairs: add a `preference:` section (docs/preference.md)")
