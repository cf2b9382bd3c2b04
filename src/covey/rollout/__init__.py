"""Rollout strategies (the `RolloutStrategy` seam, registry `STRATEGIES`): how prompts become
completions through an Engine."""

from covey.rollout.base import STRATEGIES, RolloutContext, RolloutStrategy, register_strategy
from covey.rollout.dynamic import DynamicSampling
from covey.rollout.group import GroupStrategy, completion_texts, item_columns, sample_groups

__all__ = [
    "STRATEGIES",
    "DynamicSampling",
    "GroupStrategy",
    "RolloutContext",
    "RolloutStrategy",
    "completion_texts",
    "item_columns",
    "register_strategy",
    "sample_groups",
]
