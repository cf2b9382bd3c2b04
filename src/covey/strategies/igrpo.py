"""`igrpo`: two-stage self-conditioned rollouts (draft, then refine the best draft).

Paper: "iGRPO: Self-Feedback-Driven LLM Reasoning" (arXiv 2602.09000). Status ABSTRACT + SECONDARY;
notes: docs/rollouts.md.

    stage 1 (no gradient): `drafts` completions per prompt q, scored with the run's rewards;
            d* = the best-scored draft (ties: the first)
    stage 2: q' = q + d* + `instruction`; G = the group size refinements of q'; the batch (and the
            GRPO update) is the refinements, conditioned on q'
    inference: a single pass on q (nothing changes at evaluation)

Rewards are computed on the ORIGINAL item (its prompt and columns): the refinement must answer q.
Budget split, instruction text and tie-breaking are UNVERIFIED (documented options): drafts defaults
to G // 2 (at least 1). Metrics: `igrpo/draft_reward` (mean of the best drafts) and
`igrpo/refine_gain` (mean refinement reward minus it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from covey.strategies._stages import follow_up, regroup, texts_of
from covey.strategies.base import RolloutContext, register_strategy
from covey.strategies.group import sample_groups
from covey.rollouts import Rollouts

__all__ = ["IGRPO"]

INSTRUCTION = "Above is a draft solution. Check it and write an improved, complete solution."


@register_strategy("igrpo")
class IGRPO:
    """iGRPO draft-then-refine rollouts (see the module docstring).

    drafts:      stage-1 drafts per prompt (default: group size // 2, at least 1).
    instruction: the text asking for a refinement.
    """

    def __init__(self, *, drafts: int | None = None, instruction: str = INSTRUCTION):
        if drafts is not None and drafts < 1:
            raise ValueError(f"drafts must be >= 1, got {drafts}")
        self.drafts, self.instruction = drafts, instruction

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        first = [dataclasses.replace(d, n=self.drafts or max(1, d.n // 2)) for d in ctx.draws]
        drafts = sample_groups(ctx.engine, ctx.tokenizer, first, ctx.sampling(0))
        ctx.score(drafts)
        r = drafts.scalar_rewards()
        refined = []
        best_r = []
        for g, it in enumerate(items):
            rows = (drafts.group == g).nonzero().flatten()
            best = rows[int(r[rows].argmax())]
            best_r.append(float(r[best]))
            text = texts_of(ctx.tokenizer, drafts, best.view(1))[0]
            refined.append({**it, "prompt": follow_up(it["prompt"], [text], self.instruction)})
        second = [dataclasses.replace(d, item=it) for d, it in zip(ctx.draws, refined)]
        batch = regroup(sample_groups(ctx.engine, ctx.tokenizer, second, ctx.sampling(1)), items, 0)
        metrics = dict(ctx.score(batch))
        draft_mean = sum(best_r) / len(best_r)
        metrics.update({"igrpo/draft_reward": draft_mean, "igrpo/refine_gain": float(batch.scalar_rewards().mean()) - draft_mean})
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
