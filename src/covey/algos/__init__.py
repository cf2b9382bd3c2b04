"""Algorithm components: pure tensor math, one registry per axis (`covey.algos.registry`, each a
`covey.registry.Registry`).

Importing this package registers every built-in component.
"""

from covey.algos import advantages, aggregation, corrections, group_losses, kl, regression, regularizers, surrogates  # noqa: F401  (fill registries)
from covey.algos.aggregation import batch_totals
from covey.algos.kl import entropy_bonus, kl_reward_penalty
from covey.algos.shaping import overlong_penalty
from covey.algos.presets import PRESETS, AlgoConfig, resolve_algo
from covey.algos.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    CORRECTIONS,
    KL_ESTIMATORS,
    SURROGATES,
    AdvantageResult,
    BatchTotals,
    CorrectionInputs,
    LossInputs,
)
from covey.algos.regularizers import REGULARIZERS

REGISTRIES = {
    "advantage": ADVANTAGES,
    "surrogate": SURROGATES,
    "aggregation": AGGREGATIONS,
    "kl": KL_ESTIMATORS,
    "correction": CORRECTIONS,
    "regularizer": REGULARIZERS,
}

__all__ = [
    "ADVANTAGES",
    "PRESETS",
    "AlgoConfig",
    "batch_totals",
    "entropy_bonus",
    "kl_reward_penalty",
    "overlong_penalty",
    "resolve_algo",
    "AGGREGATIONS",
    "CORRECTIONS",
    "KL_ESTIMATORS",
    "REGISTRIES",
    "REGULARIZERS",
    "SURROGATES",
    "AdvantageResult",
    "BatchTotals",
    "CorrectionInputs",
    "LossInputs",
]
