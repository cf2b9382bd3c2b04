"""`group`: G i.i.d. completions per prompt through an Engine (the GRPO rollout). The helpers every
strategy shares (chat templates in, `Rollouts` out, completions decoded back to text) are
`covey.samplers.groups`, re-exported here.
"""

from __future__ import annotations

from typing import Any

from covey.rollouts import Rollouts, item_columns
from covey.samplers.groups import completion_texts, sample_groups, sample_groups_greedy_first
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["GroupStrategy", "completion_texts", "item_columns", "sample_groups", "sample_groups_greedy_first"]


@register_strategy("group")
class GroupStrategy:
    """GRPO's rollout: each draw's `n` i.i.d. completions in one sampling round.

    greedy_first:  the first row of each group of two or more is decoded greedily (ArenaRL's rollout,
                   `sample_groups_greedy_first`); False (default): every row is sampled, as GRPO does.
    """

    caps = StrategyCaps(provides=lambda params: ("greedy_first",) if params.get("greedy_first") else ())  # covey.compat

    def __init__(self, *, greedy_first: bool = False):
        self.greedy_first = greedy_first

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sample = sample_groups_greedy_first if self.greedy_first else sample_groups
        return sample(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0)), {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
