"""`cog_rethinker`: decompose, then refine, for prompts the policy never solves.

Paper: "Cog-Rethinker: Hierarchical Metacognitive Reinforcement Learning for LLM Reasoning"
(arXiv 2510.15979). Status ABSTRACT (stage details UNVERIFIED); notes: docs/rollouts.md.

    direct rollout: G completions per prompt
    stage 1 (decomposition): prompts with zero accuracy (every reward <= `zero_reward`) get G new
            completions under a prompt asking to decompose the problem into sub-problems first
    stage 2 (refinement): prompts still at zero accuracy get G completions of a prompt that shows
            `show_wrong` earlier wrong answers and asks for a corrected solution
    batch: each prompt keeps its group from the LAST stage it went through (so a zero-accuracy
            group is replaced by a group that may carry signal); rewards are on the original item

How the paper forms groups across stages is UNVERIFIED (this replacement is a documented choice).
The paper's SFT on correct stage-1/2 samples rewritten under the direct template needs a learner
loss term and is NOT implemented here. Metrics: fraction of prompts entering each stage and how many
of them a stage rescued (some reward above zero_reward).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.strategies._stages import follow_up, regroup, texts_of
from covey.strategies.base import RolloutContext, register_strategy
from covey.strategies.group import sample_groups
from covey.rollouts import Rollouts

__all__ = ["CogRethinker"]

DECOMPOSE = "Break this problem into smaller sub-problems, solve each one, then give the final answer."
REFINE = "The answers above are wrong. Find the mistakes and write a corrected, complete solution."


@register_strategy("cog_rethinker")
class CogRethinker:
    """Cog-Rethinker rollouts (see the module docstring).

    zero_reward: a prompt is unsolved when every reward of its group is <= this.
    show_wrong:  wrong answers shown in the refinement prompt.
    """

    def __init__(self, *, zero_reward: float = 0.0, show_wrong: int = 2, decompose: str = DECOMPOSE, refine: str = REFINE):
        if show_wrong < 1:
            raise ValueError(f"show_wrong must be >= 1, got {show_wrong}")
        self.zero, self.show, self.decompose, self.refine = zero_reward, show_wrong, decompose, refine

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        batch = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0))
        draw_of = {int(d.item["id"]): d for d in ctx.draws}  # a follow-up keeps its prompt's generation cap
        metrics = dict(ctx.score(batch))
        offset = len(items)
        for stage, name in ((1, "decompose"), (2, "refine")):
            r = batch.scalar_rewards()
            unsolved = [g for g in torch.unique(batch.group).tolist() if float(r[batch.group == g].max()) <= self.zero]
            metrics[f"cog/{name}_frac"] = len(unsolved) / len(items)
            if not unsolved:
                metrics[f"cog/{name}_rescued"] = 0.0
                continue
            todo, new_draws, originals = [], [], []
            for g in unsolved:
                rows = (batch.group == g).nonzero().flatten()
                it = batch.items[int(rows[0])]
                if stage == 1:
                    prompt = follow_up(it["prompt"], [], self.decompose)
                else:
                    prompt = follow_up(it["prompt"], texts_of(ctx.tokenizer, batch, rows[: self.show]), self.refine)
                todo.append(g)
                originals.append(it)
                n = int((batch.group == g).sum())
                new_draws.append(dataclasses.replace(draw_of[int(it["id"])], item={**it, "prompt": prompt}, n=n))
            extra = regroup(sample_groups(ctx.engine, ctx.tokenizer, new_draws, ctx.sampling(stage)), originals, offset)
            offset += len(todo)
            ctx.score(extra)
            er = extra.scalar_rewards()
            metrics[f"cog/{name}_rescued"] = float(sum(float(er[extra.group == g].max()) > self.zero for g in torch.unique(extra.group).tolist()))
            keep = ~torch.isin(batch.group, torch.tensor(todo))
            batch = Rollouts.concat([batch.select(keep), extra])
        _, batch.group = torch.unique(batch.group, return_inverse=True)
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
