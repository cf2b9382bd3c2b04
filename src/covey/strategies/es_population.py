"""`es_population`: every candidate an evolution strategy proposes, rolled out on the step's prompts.

For `algo.objective: essa_provisional` (ESSA, arXiv 2507.04453). The objective (`RolloutContext.objective`)
gives this generation's candidates; for each candidate k the strategy loads its weights into the engine
(`objective.candidate_weights(k)`), samples the step's draws (the same prompts and group sizes for every
candidate, seeded per candidate) and scores them; rows carry `candidate` = k and groups unique per
(candidate, prompt). The engine is left holding the last candidate: the trainer's weight sync after the
update loads the new mean. An objective without `candidates` / `candidate_weights` is refused at the first step.
"""

from __future__ import annotations

from typing import Any

import torch

from covey.rollouts import Rollouts
from covey.samplers.groups import sample_groups
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["ESPopulation"]


@register_strategy("es_population")
class ESPopulation:
    """The population of `ctx.objective`, each candidate rolled out on the step's draws (module docstring)."""

    caps = StrategyCaps(provides=("es_population",), objective="essa_provisional")

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        obj = ctx.objective
        if obj is None or not hasattr(obj, "candidates") or not hasattr(obj, "candidate_weights"):
            raise ValueError("es_population rolls out the population of an evolution-strategy objective: set algo.objective "
                             "(essa_provisional)")  # fmt: skip
        parts = []
        metrics: dict[str, float] = {}
        for k in range(len(obj.candidates())):
            ctx.engine.load_weights(obj.candidate_weights(k), version=ctx.policy_version)
            part = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(k))
            part.group = part.group + k * len(ctx.draws)
            part.candidate = torch.full((len(part),), k, dtype=torch.long)
            m = ctx.score(part)
            metrics[f"es/candidate{k}_reward"] = float(part.scalar_rewards().mean())
            for key, v in m.items():
                metrics.setdefault(key, 0.0)
                metrics[key] += float(v) / len(obj.candidates())
            parts.append(part)
        return Rollouts.concat(parts), metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
