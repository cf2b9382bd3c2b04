"""`soft_thinking`: soft-thinking rollouts for SofT-GRPO (arXiv 2511.06411).

Each group is drawn through the engine's `generate_soft` (`covey.engine.soft`): in the thinking span every
position is a mixture of the top-k token embeddings with Gumbel-perturbed weights; the batch carries each
row's soft tokens (`Rollouts.soft_ids`, `soft_scores`: per position the k candidate ids and their scores),
not only the ids, so the learner (`algo.objective: soft_grpo`) scores them with the Gumbel log-density.

Parameters (the released script `SofT-GRPO-deepscaler-8k.sh`: top_k 5, tau_g 0.1, noise 1, top_p 0.95 from
`sampling`): `top_k`, `gumbel_temperature`, `noise_factor`, `think_end` (the text of the token that closes the
thinking span, e.g. "</think>"; empty: none) and `soft_tokens` (at most this many soft positions per row;
0: every position until `think_end`).
"""

from __future__ import annotations

from typing import Any

import torch

from covey.engine.base import SoftThinkingEngine
from covey.engine.soft import SoftParams
from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["SoftThinking"]


@register_strategy("soft_thinking", paper="SofT-GRPO: Surpassing Discrete-Token LLM Reinforcement Learning via "
                   "Gumbel-Reparameterized Soft-Thinking Policy Optimization", arxiv="2511.06411")  # fmt: skip
class SoftThinking:
    """Groups of soft-thinking completions (module docstring)."""

    caps = StrategyCaps(engine_protocols=(SoftThinkingEngine,), provides=("soft_tokens",), objective="soft_grpo")

    def __init__(self, *, top_k: int = 5, gumbel_temperature: float = 0.1, noise_factor: float = 1.0, think_end: str = "",
                 soft_tokens: int = 0):  # fmt: skip
        if top_k < 2 or gumbel_temperature <= 0 or noise_factor < 0 or soft_tokens < 0:
            raise ValueError("soft_thinking: need top_k >= 2, gumbel_temperature > 0, noise_factor >= 0 and soft_tokens >= 0 "
                             f"(got {top_k}, {gumbel_temperature}, {noise_factor}, {soft_tokens})")  # fmt: skip
        self.top_k, self.tau, self.noise, self.think_end, self.soft_tokens = top_k, gumbel_temperature, noise_factor, think_end, soft_tokens

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        end = None
        if self.think_end:
            ids = tok.encode(self.think_end, add_special_tokens=False)
            if len(ids) != 1:
                raise ValueError(f"soft_thinking: think_end {self.think_end!r} must be one token of the tokenizer, got {len(ids)}")
            end = int(ids[0])
        params = SoftParams(self.top_k, self.tau, self.noise, end, self.soft_tokens)
        parts = []
        for g, d in enumerate(ctx.draws):
            gen, soft_ids, soft_scores = ctx.engine.generate_soft([apply_chat(tok, d.item["prompt"])], d.n, ctx.sampling(g), params)
            part = Rollouts.from_generation(gen, group=torch.full((len(gen),), g, dtype=torch.long), items=[d.item] * len(gen))
            part.soft_ids, part.soft_scores = soft_ids, soft_scores
            parts.append(part.validate())
        batch = Rollouts.concat(parts) if len(parts) > 1 else parts[0]
        soft = torch.tensor([float((s[:, 1:] != 0).any(-1).sum()) for s in batch.soft_ids])
        return batch, {"soft/soft_tokens_mean": float(soft.mean()),
                       "soft/soft_frac": float(soft.sum() / batch.completion_mask.sum().clamp(min=1))}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
