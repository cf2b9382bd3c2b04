"""`vade`: Beta posterior per prompt, Thompson-style selection by information gain, two-scale decay.

Paper: "VADE: Variance-Aware Dynamic Sampling via Online Sample-Level Difficulty Estimation for
Multimodal RL", arXiv 2511.18902. The three components (Beta difficulty estimate, Thompson sampler
maximising information gain, two-scale prior decay) are confirmed by the abstract; the update
equations and defaults below are covey's reconstruction (notes: docs/sampling.md) and are
UNVERIFIED against the paper ("VADE-style"):

    per prompt i: alpha_i, beta_i (init a0), last_seen_i
    draw t:   d = lambda_long ** (t - last_seen_i)                  (long scale: drift while unseen)
              alpha_eff = a0 + d (alpha_i - a0);  beta_eff = a0 + d (beta_i - a0)
              p ~ Beta(alpha_eff, beta_eff);  score = p (1 - p);  take the top-k scores
    observe:  alpha_i = lambda_short alpha_eff + k_i;  beta_i = lambda_short beta_eff + (n_i - k_i)
              (short scale), last_seen_i = t;  t += 1 after each observed batch

k_i / n_i are the prompt's successes / rollouts this step (`covey.samplers.feedback.row_success`).
Items drawn since the last `observe` are not drawn again before it (refills get new prompts).

Fidelity: PROVISIONAL (reconstructed; searched again for round two). No released code was found: the
paper points to its project page (VADE-RL.github.io); no repository of the authors is in the searchable
index, and the paper's method section could not be read. The abstract's objective is "information gain
through the estimated correctness probability"; covey scores p (1 - p), the binary reward's variance.
The Beta-entropy reading of information gain (expected entropy drop after G rollouts at the sampled p)
is not used: it grows toward p = 0 or 1 (0.2785 at p = 0.5, 0.3767 at p = 0.9 for a uniform prior and
G = 2; docs/sampling.md), against the method's variance-aware aim. The update rules above stay UNVERIFIED.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from covey.samplers.base import BaseSampler, Draw, Feedback, register_sampler
from covey.samplers.feedback import ItemIndex, draw_generator, prompt_outcomes
from covey.rollouts import Rollouts

__all__ = ["VadeSampler", "decayed_posterior", "posterior_update", "thompson_scores"]


def decayed_posterior(alpha: Tensor, beta: Tensor, age: Tensor, a0: float, lambda_long: float) -> tuple[Tensor, Tensor]:
    """Long-scale decay toward the prior a0 after `age` steps unseen: a0 + lambda_long**age (x - a0)."""
    d = torch.pow(torch.full_like(alpha, lambda_long), age.to(alpha.dtype))
    return a0 + d * (alpha - a0), a0 + d * (beta - a0)


def thompson_scores(alpha: Tensor, beta: Tensor, gen: torch.Generator) -> Tensor:
    """One Beta(alpha, beta) draw p per prompt, scored p (1 - p) (the group-variance proxy)."""
    x = torch._standard_gamma(alpha.double(), generator=gen)
    y = torch._standard_gamma(beta.double(), generator=gen)
    p = x / (x + y)
    return p * (1 - p)


def posterior_update(alpha_eff: Tensor, beta_eff: Tensor, k: Tensor, n: Tensor, lambda_short: float) -> tuple[Tensor, Tensor]:
    """Short-scale decay then the new counts: (ls alpha + k, ls beta + n - k)."""
    return lambda_short * alpha_eff + k, lambda_short * beta_eff + (n - k)


@register_sampler("vade")
class VadeSampler(BaseSampler):
    """VADE-style Thompson selection (see the module docstring).

    a0:            Beta prior pseudo-count for alpha and beta (1 = uniform prior).
    lambda_short:  decay of the posterior at each visit, in (0, 1].
    lambda_long:   per-step decay toward the prior while a prompt is not visited, in (0, 1].
    """

    def __init__(self, items: Sequence[dict], seed: int = 0, *, a0: float = 1.0, lambda_short: float = 0.8,
                 lambda_long: float = 0.99):  # fmt: skip
        super().__init__(items, seed)
        if a0 <= 0:
            raise ValueError(f"sampler vade: a0 must be > 0, got {a0}")
        for name, v in (("lambda_short", lambda_short), ("lambda_long", lambda_long)):
            if not 0 < v <= 1:
                raise ValueError(f"sampler vade: {name} must be in (0, 1], got {v}")
        self.a0, self.lambda_short, self.lambda_long = float(a0), float(lambda_short), float(lambda_long)
        self.index = ItemIndex(items)
        m = len(items)
        self.alpha = torch.full((m,), self.a0, dtype=torch.float64)
        self.beta = torch.full((m,), self.a0, dtype=torch.float64)
        self.last_seen = torch.zeros(m, dtype=torch.long)
        self.t, self.calls = 0, 0
        self.pending = torch.zeros(m, dtype=torch.bool)  # drawn since the last observe
        self.seen = torch.zeros(m, dtype=torch.bool)

    def _effective(self) -> tuple[Tensor, Tensor]:
        return decayed_posterior(self.alpha, self.beta, self.t - self.last_seen, self.a0, self.lambda_long)

    def next(self, k: int, group_size: int) -> list[Draw]:
        gen = draw_generator(self.seed, "vade", self.calls)
        self.calls += 1
        a, b = self._effective()
        score = thompson_scores(a, b, gen)
        if self.pending.all():  # every item is out already: allow repeats rather than fail
            self.pending.zero_()
        score = torch.where(self.pending, torch.full_like(score, -1.0), score)
        ties = torch.rand(len(score), generator=gen, dtype=torch.float64) * 1e-12  # random tie-break
        order = torch.argsort(score + ties, descending=True, stable=True)
        pick = order[: min(k, int((~self.pending).sum()))].tolist()
        while len(pick) < k:  # fewer items than k: cycle through the ranking
            pick += order[: k - len(pick)].tolist()
        self.pending[pick] = True
        return [Draw(self.items[i], group_size) for i in pick]

    def observe(self, batch: Rollouts) -> Feedback:
        ids, succ, count = prompt_outcomes(batch)
        pos = self.index.positions(ids)
        a, b = self._effective()
        self.alpha[pos], self.beta[pos] = posterior_update(a[pos], b[pos], succ, count, self.lambda_short)
        self.last_seen[pos], self.seen[pos] = self.t, True
        self.t += 1
        self.pending.zero_()
        p = self.alpha[pos] / (self.alpha[pos] + self.beta[pos])
        return Feedback({"sampler/vade/p_mean": float(p.mean()), "sampler/vade/visited_frac": float(self.seen.double().mean())})

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha.clone(), "beta": self.beta.clone(), "last_seen": self.last_seen.clone(),
                "t": self.t, "calls": self.calls, "pending": self.pending.clone(), "seen": self.seen.clone()}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["alpha"].shape != self.alpha.shape:
            raise ValueError(f"sampler vade: checkpoint holds {state['alpha'].numel()} prompts, the task has {len(self.items)}")
        self.alpha, self.beta = state["alpha"].clone(), state["beta"].clone()
        self.last_seen, self.pending = state["last_seen"].clone(), state["pending"].clone()
        self.seen = state["seen"].clone()
        self.t, self.calls = int(state["t"]), int(state["calls"])
