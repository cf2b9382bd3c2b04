"""`group`: G i.i.d. completions per prompt through an Engine (the GRPO rollout). The helpers every
strategy shares (chat templates in, `Rollouts` out, completions decoded back to text) are
`covey.samplers.groups`, re-exported here.
"""

from __future__ import annotations

from typing import Any

from covey.rollouts import Rollouts, item_columns
from covey.samplers.groups import completion_texts, sample_groups
from covey.strategies.base import RolloutContext, register_strategy

__all__ = ["GroupStrategy", "completion_texts", "item_columns", "sample_groups"]


@register_strategy("group")
class GroupStrategy:
    """GRPO's rollout: each draw's `n` i.i.d. completions in one sampling round."""

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        return sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0)), {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
