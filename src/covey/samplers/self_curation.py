"""`self`: low-likelihood data curation -- train only on prompts the policy's mode does not already solve.

Paper: "The Reasoning Boundary Paradox: How Reinforcement Learning Constrains Language Models",
arXiv 2510.02230. Status CODE (mail-research/SELF-llm-interference,
`RayMaxPPOTrainer.fit`): each step the released trainer greedy-decodes one response per prompt, keeps
only prompts whose greedy answer is not correct (reward != 1.0) and runs GRPO (n = 8) on those.

Two ways to find the prompts the policy's mode already solves (`greedy_check`):

    "decode" (default, the released code): in the sampler hook `before_rollout` (covey.samplers.base),
              greedy-decode (argmax) one response per drawn prompt through the step's engine (the
              run's max_new_tokens and stops), score it with the run's rewards (`ctx.score`);
              a prompt whose greedy success (`feedback.row_success`) is >= correct_threshold is
              high-likelihood: it is not rolled out (and is gated, below); the others are rolled
              out and trained on as usual. If none is left the step is skipped (empty batch).
              Costs one greedy completion per prompt per step (metric `greedy_tokens`).
    "proxy" (covey's cheaper approximation, no extra generation): in `observe`, the greedy answer
              is approximated by the group's most likely sample: the row with the largest
              sum_t behaviour_logprob ("max_logprob") or the largest mean per token
              ("max_mean_logprob"); ties: first row. If it is correct, all the prompt's rows leave
              the loss (its `Feedback.keep_rows`); if a whole batch is high-likelihood the loss is
              empty (the learner skips rows without tokens). Differs from greedy decoding, most at
              high temperature.

    next:     `skip_epochs: 0` (default, the released trainer): every prompt is drawn in the uniform
              order and re-checked every step, so a step trains on the smaller batch of unsolved
              prompts. `skip_epochs: k` (covey's addition, its default before round two: 1) skips a
              gated (high-likelihood) prompt for the next k epochs, so the draw refills the batch with
              others; when nothing else is left gated prompts are drawn anyway

Prompts that a rollout strategy draws itself for refills (`ctx.draw`, e.g. `dynamic`) do not pass
through `before_rollout`, so they are not greedy-checked. The forward-KL variant is not implemented.

Fidelity (re-read 2026-11-24): checked against the released code
mail-research/SELF-llm-interference @ d17634bc058634549b2b5652fa1ca52099b7f4ae
(`verl/verl/trainer/ppo/ray_trainer.py::RayMaxPPOTrainer.fit`, the "gen_max" block): one greedy
(do_sample False) response per prompt, prompts whose summed reward != 1.0 are kept, none left ->
the step is skipped; `greedy_check: decode` with the default `skip_epochs: 0` does this. Difference:
"correct" is `row_success >= correct_threshold` (the accuracy column when present) instead of the
summed reward being exactly 1.0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import torch

from covey.samplers.base import Draw, Feedback, register_sampler
from covey.samplers.feedback import row_success
from covey.samplers._sampling import GatedUniform
from covey.samplers.groups import sample_groups
from covey.rollouts import Rollouts

__all__ = ["SelfSampler", "likely_rows"]


def likely_rows(logp: torch.Tensor, mask: torch.Tensor, group: torch.Tensor, how: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(dense group index [N], row index [B] of each group's most likely completion, ties: first row)."""
    m = mask.double()
    score = (logp.double() * m).sum(-1)
    if how == "max_mean_logprob":
        score = score / m.sum(-1).clamp(min=1)
    _, inv = torch.unique(group, return_inverse=True)
    b, n = int(inv.max()) + 1, score.numel()
    best = torch.full((b,), -torch.inf, dtype=torch.float64).scatter_reduce(0, inv, score, "amax")
    cand = torch.where(score == best[inv], torch.arange(n), torch.full((n,), n))
    return inv, torch.full((b,), n).scatter_reduce(0, inv, cand, "amin")


@register_sampler("self")
class SelfSampler(GatedUniform):
    """SELF curation (see the module docstring).

    greedy_check:       "decode" (a greedy decode per prompt before the rollout, as released) or "proxy".
    correct_threshold:  a success (`feedback.row_success`, in [0, 1]) at or above this is correct (1.0).
    greedy_proxy:       for "proxy": "max_logprob" (default) or "max_mean_logprob", which sampled row
                        stands in for the greedy answer; refused with "decode".
    skip_epochs:        epochs a high-likelihood prompt is skipped before it is checked again (0, default: never
                        skipped, re-checked every step, as released).
    """

    def __init__(
        self, items: Sequence[dict], seed: int = 0, *, greedy_check: Literal["decode", "proxy"] = "decode",
        correct_threshold: float = 1.0, greedy_proxy: Literal["max_logprob", "max_mean_logprob"] | None = None,
        skip_epochs: int = 0,
    ):  # fmt: skip
        super().__init__(items, seed, skip_epochs)
        if greedy_check not in ("decode", "proxy"):
            raise ValueError(f"sampler self: greedy_check must be 'decode' or 'proxy', got {greedy_check!r}")
        if greedy_check == "decode" and greedy_proxy is not None:
            raise ValueError(f"sampler self: greedy_proxy={greedy_proxy!r} chooses the row that stands in for the greedy "
                             "answer with greedy_check 'proxy'; greedy_check 'decode' decodes it (set greedy_check: proxy)")  # fmt: skip
        greedy_proxy = greedy_proxy or "max_logprob"
        if greedy_proxy not in ("max_logprob", "max_mean_logprob"):
            raise ValueError(f"sampler self: greedy_proxy must be 'max_logprob' or 'max_mean_logprob', got {greedy_proxy!r}")
        if not 0.0 < correct_threshold <= 1.0:
            raise ValueError(f"sampler self: correct_threshold must be in (0, 1], got {correct_threshold}")
        self.greedy_check, self.correct_threshold, self.greedy_proxy = greedy_check, correct_threshold, greedy_proxy

    def before_rollout(self, draws: list[Draw], ctx) -> tuple[list[Draw], dict[str, float]]:
        """greedy_check "decode": drop the draws whose greedy answer is already correct."""
        if self.greedy_check != "decode" or not draws:
            return draws, {}
        sp = dataclasses.replace(ctx.sampling(0), greedy=True, return_entropies=False)
        greedy = sample_groups(ctx.engine, ctx.tokenizer, [Draw(d.item, 1) for d in draws], sp)  # one row per draw, in order
        ctx.score(greedy)  # the run's rewards (its reward metrics are this step's rollout's, not these)
        solved = (row_success(greedy).cpu() >= self.correct_threshold).tolist()
        for d, ok in zip(draws, solved):
            self.gate(int(d.item["id"]), ok)
        metrics = {"sampler/self/greedy_solved_frac": sum(solved) / len(draws), "sampler/self/greedy_tokens": float(greedy.lengths.sum())}
        return [d for d, ok in zip(draws, solved) if not ok], {**metrics, **self.draw_metrics("self")}

    def observe(self, batch: Rollouts) -> Feedback:
        if self.greedy_check == "decode":
            return Feedback()  # the check ran before the rollout: every prompt here is low-likelihood
        mask = batch.completion_mask.cpu()
        inv, best = likely_rows(batch.behaviour_logprobs.cpu(), mask, batch.group.cpu(), self.greedy_proxy)
        solved = row_success(batch).cpu()[best] >= self.correct_threshold  # [B]
        pid = batch.prompt_id.cpu()
        for g, row in enumerate(best.tolist()):
            self.gate(int(pid[row]), bool(solved[g]))
        metrics = {"sampler/self/high_likelihood_frac": float(solved.double().mean()), **self.draw_metrics("self")}
        return Feedback(metrics, keep_rows=~solved[inv])
