"""`spo`: per-prompt value tracker, prioritised sampling, one completion per prompt.

Paper: "Single-stream Policy Optimization", arXiv 2509.13232. Behaviour follows the authors' code
(verl-recipe `spo/spo_ray_trainer.py`, specs/rollouts-data-agents.md §A.5, status CODE):

    per prompt: alpha, beta   (p_hat = alpha / (alpha + beta))
    init (offline scores s_1..s_Neff in {0,1} from the base model, optional):
        N_init = 1 / (1 - clip_lower);  alpha = N_init (sum s + 0.5) / (Neff + 1)
        beta = N_init (Neff - sum s + 0.5) / (Neff + 1);  no scores: alpha = beta = 0.5
    draw:     w = sqrt(p_hat (1 - p_hat)) + eps; k prompts with prob ∝ w (from `candidates` prompts
              drawn uniformly, or the whole pool), with replacement only when k > #candidates
    observe:  baseline of each row = p_hat BEFORE the update -> batch.extras["spo_baseline"] [N]
              alpha = rho alpha + k_i;  beta = rho beta + (n_i - k_i)

The `spo` advantage estimator (covey.algos.advantages.spo) reads the baseline: A = r - p_hat, then
normalised over the whole batch. Forgetting: the code's default rho.type "kl" sets
rho = clip(2^(-D/0.06), clip_lower, 0.96) from the log-prob drift D of the prompt's previous
response, which needs a policy forward pass the sampler seam does not have; covey implements the
code's rho.type "constant" (rho = 0.875, the value "kl" takes for any D >= 0.0116). `spo_rho`
computes the KL rule for a given D. With n > 1 completions a visit adds all n outcomes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from covey.data.base import BaseSampler, register_sampler
from covey.data.feedback import ItemIndex, draw_generator, prompt_outcomes
from covey.rollouts import Rollouts

__all__ = ["BASELINE_KEY", "SPOSampler", "offline_prior", "spo_rho", "spo_weights"]

BASELINE_KEY = "spo_baseline"


def offline_prior(scores: Sequence[float], clip_lower: float = 0.875) -> tuple[float, float]:
    """(alpha, beta) from offline 0/1 scores of the base model (SPO code; no scores -> 0.5, 0.5)."""
    n = len(scores)
    if n == 0:
        return 0.5, 0.5
    n_init = 1.0 / (1.0 - clip_lower)
    s = float(sum(scores))
    return n_init * (s + 0.5) / (n + 1), n_init * (n - s + 0.5) / (n + 1)


def spo_rho(drift: float, clip_lower: float = 0.875, clip_upper: float = 0.96, d_half: float = 0.06) -> float:
    """KL-adaptive forgetting factor of the SPO code: clip(2^(-D / d_half), clip_lower, clip_upper)."""
    return min(max(2.0 ** (-drift / d_half), clip_lower), clip_upper)


def spo_weights(alpha: Tensor, beta: Tensor, eps: float) -> Tensor:
    """Sampling weights sqrt(p_hat (1 - p_hat)) + eps (never zero for eps > 0)."""
    p = alpha / (alpha + beta)
    return torch.sqrt(p * (1 - p)) + eps


@register_sampler("spo")
class SPOSampler(BaseSampler):
    """SPO's tracker and prioritised sampler (see the module docstring).

    n:           completions per prompt (SPO: 1, a single stream).
    rho:         constant forgetting factor in (0, 1] (code default 0.875).
    eps:         exploration floor of the sampling weight (0.05).
    candidates:  prompts drawn uniformly before prioritised sampling (SPO's gen_batch_size); None = all.
    offline_key: item column holding offline 0/1 scores for the prior (None: alpha = beta = 0.5).
    clip_lower:  sets the prior's strength N_init = 1 / (1 - clip_lower) (0.875 -> 8).
    """

    def __init__(self, items: Sequence[dict], seed: int = 0, *, n: int = 1, rho: float = 0.875, eps: float = 0.05,
                 candidates: int | None = None, offline_key: str | None = None, clip_lower: float = 0.875):  # fmt: skip
        super().__init__(items, seed)
        if n < 1:
            raise ValueError(f"sampler spo: n must be >= 1, got {n}")
        if not 0 < rho <= 1:
            raise ValueError(f"sampler spo: rho must be in (0, 1], got {rho}")
        if eps <= 0:
            raise ValueError(f"sampler spo: eps must be > 0 (weights must never be zero), got {eps}")
        if candidates is not None and candidates < 1:
            raise ValueError(f"sampler spo: candidates must be >= 1 or null, got {candidates}")
        if not 0 <= clip_lower < 1:
            raise ValueError(f"sampler spo: clip_lower must be in [0, 1), got {clip_lower}")
        self.n, self.rho, self.eps, self.candidates = n, float(rho), float(eps), candidates
        self.index = ItemIndex(items)
        prior = [offline_prior(self._scores(it, i, offline_key), clip_lower) if offline_key else (0.5, 0.5)
                 for i, it in enumerate(items)]  # fmt: skip
        self.alpha = torch.tensor([a for a, _ in prior], dtype=torch.float64)
        self.beta = torch.tensor([b for _, b in prior], dtype=torch.float64)
        self.calls = 0

    @staticmethod
    def _scores(item: dict, i: int, key: str) -> list[float]:
        s = item.get(key)
        if not isinstance(s, (list, tuple)) or not all(isinstance(x, (int, float)) for x in s):
            raise ValueError(f"sampler spo: item {i} (id {item.get('id')}) column {key!r} must be a list of 0/1 scores, got {s!r}")
        return list(s)

    def next(self, k: int) -> list[dict]:
        gen = draw_generator(self.seed, "spo", self.calls)
        self.calls += 1
        m = len(self.items)
        pool = torch.arange(m)
        if self.candidates is not None and self.candidates < m:
            pool = torch.randperm(m, generator=gen)[: self.candidates]
        w = spo_weights(self.alpha[pool], self.beta[pool], self.eps)
        pick = pool[torch.multinomial(w, k, replacement=k > len(pool), generator=gen)]
        return [self.items[i] for i in pick.tolist()]

    def group_sizes(self, items: list[dict], group_size: int) -> list[int]:
        return [self.n] * len(items)

    def observe(self, batch: Rollouts) -> dict[str, float]:
        ids, succ, count = prompt_outcomes(batch)
        pos = self.index.positions(ids)
        p_hat = self.alpha / (self.alpha + self.beta)
        row_pos = self.index.positions(batch.prompt_id.cpu())
        batch.extras[BASELINE_KEY] = p_hat[row_pos].to(torch.float32).to(batch.prompt_id.device)
        self.alpha[pos] = self.rho * self.alpha[pos] + succ
        self.beta[pos] = self.rho * self.beta[pos] + (count - succ)
        return {"sampler/spo/p_hat_mean": float(p_hat[pos].mean()), "sampler/spo/unique_frac": len(ids) / max(len(batch), 1)}

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha.clone(), "beta": self.beta.clone(), "calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["alpha"].shape != self.alpha.shape:
            raise ValueError(f"sampler spo: checkpoint holds {state['alpha'].numel()} prompts, the task has {len(self.items)}")
        self.alpha, self.beta, self.calls = state["alpha"].clone(), state["beta"].clone(), int(state["calls"])


