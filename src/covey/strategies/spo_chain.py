"""`spo_chain`: SPO-chain rollouts, Monte-Carlo values at cut points inside each completion.

Paper: "Segment Policy Optimization" (SPO), arXiv 2505.23564, chain variant (short CoT). The math
(cut points, segment advantages) lives with the estimator in `covey.algos.advantages.spo_segment`
(one home for SPO); this strategy only draws and scores the continuations:

    1. the draws' groups (`sample_groups`), scored
    2. per row: cut points c = [t - 1 for t with p_t < prob_threshold][::interval], p_t the sampled
       token's probability (behaviour log-probs, i.e. at the sampling temperature)
    3. per cut: `samples` continuations of prompt + o_{<=c} (one engine call for all cuts, round 1),
       each capped so prefix + continuation stays within max_new_tokens, scored with `ctx.score` as
       whole completions (prefix + continuation); V(c) = their mean scalar reward (a truncated
       continuation gets whatever the reward functions give an unfinished answer)
    4. `Rollouts.token_advantages` = `chain_advantages(V, L, r)` per row (raw, before the
       probability mask and whitening that the `spo_chain` estimator applies)

SPO's defaults: interval 5, samples 9, 8 rollouts per prompt, sampling temperature 0.6 (set
`sampling.temperature`). Pair with ``algo.advantage: spo_chain``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.algos.advantages.spo_segment import chain_advantages, chain_cut_points
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.strategies.group import sample_groups

__all__ = ["SPOChain"]


@register_strategy("spo_chain")
class SPOChain:
    """SPO-chain rollouts (see the module docstring).

    samples:         MC continuations per cut point (SPO: 9).
    interval:        keep every `interval`-th cut point (SPO: 5; `cutpoint_interval`).
    prob_threshold:  a cut goes before each token with probability below it (SPO: 0.9).
    """

    caps = StrategyCaps(provides=("spo_chain_advantages",))

    def __init__(self, *, samples: int = 9, interval: int = 5, prob_threshold: float = 0.9):
        if samples < 1 or interval < 1:
            raise ValueError(f"rollout strategy spo_chain: samples and interval must be >= 1, got {samples}, {interval}")
        if not 0.0 < prob_threshold <= 1.0:
            raise ValueError(f"rollout strategy spo_chain: prob_threshold must be in (0, 1], got {prob_threshold}")
        self.samples, self.interval, self.threshold = samples, interval, prob_threshold

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        batch = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, sp)
        metrics = dict(ctx.score(batch))
        lengths = batch.lengths.tolist()
        probs = batch.behaviour_logprobs.double().exp()
        cuts = [chain_cut_points(probs[i, :n].tolist(), threshold=self.threshold, interval=self.interval)
                for i, n in enumerate(lengths)]  # fmt: skip
        jobs = [(i, c) for i, cs in enumerate(cuts) for c in cs]
        values: list[dict[int, float]] = [{} for _ in lengths]
        if jobs:
            values_of = self._mc_values(batch, jobs, ctx)
            for (i, c), v in zip(jobs, values_of):
                values[i][c] = v
        r = batch.scalar_rewards().tolist()
        adv = torch.zeros_like(batch.completion_mask)
        for i, n in enumerate(lengths):
            adv[i, :n] = torch.tensor(chain_advantages(values[i], n, r[i]), dtype=torch.float32)
        batch.token_advantages = adv
        metrics.update({
            "spo_chain/cuts_per_row": len(jobs) / max(len(batch), 1),
            "spo_chain/mc_rollouts": float(len(jobs) * self.samples),
        })  # fmt: skip
        return batch, metrics

    def _mc_values(self, batch: Rollouts, jobs: list[tuple[int, int]], ctx: RolloutContext) -> list[float]:
        """Mean scalar reward of `samples` continuations from each (row, cut) prefix."""
        sp = ctx.sampling(1)
        prefixes = [torch.cat([batch.prompt_ids[i].cpu(), batch.completion_ids[i, : c + 1].cpu()]) for i, c in jobs]
        limits = tuple(max(1, sp.max_new_tokens - (c + 1)) for _, c in jobs)
        gen = ctx.engine.generate(prefixes, self.samples, dataclasses.replace(sp, prompt_max_new_tokens=limits))
        rows = gen.prompt_index.tolist()
        cont_len = gen.lengths.tolist()
        full, full_lp = [], []
        for k, j in enumerate(rows):
            i, c = jobs[j]
            full.append(torch.cat([batch.completion_ids[i, : c + 1].cpu(), gen.completion_ids[k, : cont_len[k]].cpu()]))
            full_lp.append(torch.cat([batch.behaviour_logprobs[i, : c + 1].cpu(), gen.logprobs[k, : cont_len[k]].cpu()]))
        t = max(1, max(len(x) for x in full))
        ids = torch.full((len(full), t), ctx.engine.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(full), t)
        lp = torch.zeros(len(full), t)
        for k, x in enumerate(full):
            ids[k, : len(x)] = x
            mask[k, : len(x)] = 1.0
            lp[k, : len(x)] = full_lp[k].float()
        src = [jobs[j][0] for j in rows]
        cont = Rollouts(
            prompt_ids=[batch.prompt_ids[i] for i in src], completion_ids=ids, completion_mask=mask,
            behaviour_logprobs=lp, group=torch.tensor(rows, dtype=torch.long),
            prompt_id=batch.prompt_id[src].cpu(), finish_reason=list(gen.finish_reason),
            items=[batch.items[i] for i in src] if batch.items is not None else None,
        ).validate()  # fmt: skip
        ctx.score(cont)
        r = cont.scalar_rewards().double()
        total = torch.zeros(len(jobs), dtype=torch.float64).index_add_(0, torch.tensor(rows), r.cpu())
        count = torch.bincount(torch.tensor(rows), minlength=len(jobs)).double()
        return (total / count.clamp(min=1)).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
