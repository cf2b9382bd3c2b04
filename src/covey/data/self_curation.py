"""`self`: low-likelihood data curation -- train only on prompts the policy's mode does not already solve.

Paper: "The Reasoning Boundary Paradox: How Reinforcement Learning Constrains Language Models",
arXiv 2510.02230. Spec: specs/rollouts-data-agents.md §A.8 (CODE: mail-research/SELF-llm-interference,
`RayMaxPPOTrainer.fit`): each step the released trainer greedy-decodes one response per prompt, keeps
only prompts whose greedy answer is not correct (reward != 1.0) and runs GRPO (n = 8) on those.

What covey implements through the sampler seam (which has no engine):

    observe:  per group, the "greedy" answer is approximated by the group's most likely sample:
              the row with the largest sum_t behaviour_logprob ("max_logprob") or the largest mean
              per token ("max_mean_logprob"); ties: first row.
              if its success >= correct_threshold the prompt is high-likelihood: all its rows leave
              the loss (completion_mask zeroed) and the prompt is gated
              otherwise the prompt is low-likelihood: trained on as usual, and un-gated
    next:     gated prompts are skipped for the next `skip_epochs` epochs of the uniform order
              (then re-checked); when nothing else is left they are drawn anyway

The approximation (most likely sampled completion instead of a greedy decode) is covey's: it costs no
extra generation but differs from greedy decoding, most at high temperature. The exact pre-rollout
greedy check needs a rollout strategy with an extra temperature-0 engine call (not built here). If a
whole batch is high-likelihood the step's loss is empty (the learner skips rows without tokens),
which matches the released trainer skipping the step. The forward-KL variant is not implemented.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from covey.data.base import register_sampler
from covey.data.feedback import row_success
from covey.data._sampling import GatedUniform, drop_rows
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

    correct_threshold:  a success (`feedback.row_success`, in [0, 1]) at or above this is correct (1.0).
    greedy_proxy:       "max_logprob" or "max_mean_logprob": which sampled row stands in for the greedy answer.
    skip_epochs:        epochs a high-likelihood prompt is skipped before it is checked again (0: never skipped).
    """

    def __init__(
        self, items: Sequence[dict], seed: int = 0, *, correct_threshold: float = 1.0,
        greedy_proxy: Literal["max_logprob", "max_mean_logprob"] = "max_logprob", skip_epochs: int = 1,
    ):  # fmt: skip
        super().__init__(items, seed, skip_epochs)
        if greedy_proxy not in ("max_logprob", "max_mean_logprob"):
            raise ValueError(f"sampler self: greedy_proxy must be 'max_logprob' or 'max_mean_logprob', got {greedy_proxy!r}")
        if not 0.0 < correct_threshold <= 1.0:
            raise ValueError(f"sampler self: correct_threshold must be in (0, 1], got {correct_threshold}")
        self.correct_threshold, self.greedy_proxy = correct_threshold, greedy_proxy

    def observe(self, batch: Rollouts) -> dict[str, float]:
        mask = batch.completion_mask.cpu()
        inv, best = likely_rows(batch.behaviour_logprobs.cpu(), mask, batch.group.cpu(), self.greedy_proxy)
        solved = row_success(batch).cpu()[best] >= self.correct_threshold  # [B]
        pid = batch.prompt_id.cpu()
        for g, row in enumerate(best.tolist()):
            self.gate(int(pid[row]), bool(solved[g]))
        drop_rows(batch, ~solved[inv])
        return {"sampler/self/high_likelihood_frac": float(solved.double().mean()), **self.draw_metrics("self")}
