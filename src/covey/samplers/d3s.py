"""`d3s`: Dynamic Dual-Level Down-Sampling -- max-variance sample subset, |A|*H token selection, annealed.

Paper: "Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy
Optimization", arXiv 2509.22115 (notes: docs/sampling.md). The three ideas are
confirmed by the abstract; ratios, schedule and ranking scope are UNVERIFIED (covey's defaults are
suggestions, not the paper's).

In `observe` (after scoring, before the advantage estimator), with GRPO advantages
A_i = (r_i - mean_g) / (std_g + eps) computed here from the scalar rewards:

    sample level: keep k = ceil(rho_s * n) rows maximising Var(A_K); scope "batch" (D3S: n = N)
                  or "group" (D3S-I: per group, n = group size). Exact maximiser (PODS lemma,
                  arXiv 2504.13818): sort A; the best size-k subset is the i largest plus the k - i
                  smallest for some i in 0..k -- scan i.
    token level:  in kept rows keep the tokens with the largest |A_i| * H_it (H = entropy of the
                  sampling distribution, `batch.entropies`): ceil(rho_t * L_i) per row (token_scope
                  "sequence") or ceil(rho_t * kept tokens) over the batch ("batch").
    schedule:     rho = start + (end - start) * f(min(t / anneal_steps, 1)), f linear or cosine
                  ((1 - cos(pi x)) / 2); t = batches observed so far.

`observe` returns the kept rows and tokens (`Feedback.keep_rows` / `keep_tokens`); the trainer
takes the others out of the loss through `batch.completion_mask` (the learner's loss mask).
The chosen advantage estimator still computes its advantages from every reward (the group statistics
include dropped rows, as in the paper, where selection follows advantage computation). The sampler
declares `requires = ("entropies",)`, so the trainer asks the engine for token entropies.
Prompt order: a uniform seeded permutation (D3S selects after the rollout).

Fidelity (re-read 2026-11-24): reconstructed. No released code was found for arXiv 2509.22115;
the ratios, schedule and ranking scope stay UNVERIFIED.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from covey.samplers.base import Feedback, register_sampler
from covey.samplers.sampler import UniformSampler
from covey.samplers._sampling import kept_mask
from covey.rollouts import Rollouts

__all__ = ["D3SSampler", "annealed", "max_variance_subset", "top_tokens"]


def max_variance_subset(a: Tensor, k: int) -> Tensor:
    """[k] long indices of the size-k subset of `a` [n] with the largest variance (ties: fewest top rows)."""
    n = a.numel()
    if k >= n:
        return torch.arange(n)
    if k <= 0:
        return torch.zeros(0, dtype=torch.long)
    x = a.double()
    order = torch.argsort(x, stable=True)  # ascending
    s = x[order]
    c1 = torch.cat([torch.zeros(1, dtype=x.dtype), torch.cumsum(s, 0)])  # prefix sums (smallest first)
    c2 = torch.cat([torch.zeros(1, dtype=x.dtype), torch.cumsum(s * s, 0)])
    best, best_i = -math.inf, 0
    for i in range(k + 1):  # i largest + (k - i) smallest
        sm = c1[k - i] + (c1[n] - c1[n - i])
        sq = c2[k - i] + (c2[n] - c2[n - i])
        var = float(sq / k - (sm / k) ** 2)
        if var > best + 1e-12:
            best, best_i = var, i
    return torch.cat([order[: k - best_i], order[n - best_i :]]).sort().values


def top_tokens(score: Tensor, mask: Tensor, rho: float, scope: Literal["sequence", "batch"]) -> Tensor:
    """[N, T] bool: the ceil(rho * L) highest-`score` unmasked tokens per row, or ceil(rho * sum L) over the batch."""
    m = mask > 0
    s = torch.where(m, score.double(), torch.full_like(score, -math.inf, dtype=torch.float64))
    keep = torch.zeros_like(m)
    if scope == "batch":
        k = math.ceil(rho * int(m.sum()))
        flat = torch.argsort(s.flatten(), descending=True, stable=True)[:k]
        keep.view(-1)[flat] = True
        return keep & m
    order = torch.argsort(s, dim=-1, descending=True, stable=True)
    k = torch.ceil(rho * m.sum(-1).double()).long()  # [N]
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(s.shape[1]).expand_as(order).contiguous())
    return (rank < k[:, None]) & m


def annealed(start: float, end: float, t: int, steps: int, shape: Literal["linear", "cosine"]) -> float:
    """start -> end over `steps` observed batches (then end)."""
    x = 1.0 if steps <= 0 else min(t / steps, 1.0)
    f = x if shape == "linear" else (1.0 - math.cos(math.pi * x)) / 2.0
    return start + (end - start) * f


def _grpo_advantages(r: Tensor, group: Tensor, eps: float) -> Tensor:
    _, inv, cnt = torch.unique(group, return_inverse=True, return_counts=True)
    b, c = cnt.numel(), cnt.double()
    mean = torch.zeros(b, dtype=torch.float64).index_add_(0, inv, r) / c
    ss = torch.zeros(b, dtype=torch.float64).index_add_(0, inv, (r - mean[inv]) ** 2)
    std = torch.where(c > 1, ss / (c - 1).clamp(min=1), torch.zeros_like(ss)).sqrt()
    return torch.where(c[inv] > 1, (r - mean[inv]) / (std[inv] + eps), torch.zeros_like(r))


@register_sampler("d3s")
class D3SSampler(UniformSampler):
    """D3S down-sampling (see the module docstring).

    sample_keep_start / sample_keep_end:  rho_s over training (1.0 = keep every row).
    token_keep_start / token_keep_end:    rho_t over training (1.0 = keep every token).
    anneal_steps:  batches over which the ratios move (0: use the end values at once).
    schedule:      "linear" or "cosine".
    scope:         "batch" (D3S) or "group" (D3S-I).     token_scope: "sequence" or "batch".
    eps:           std epsilon of the GRPO advantage used for selection.
    """

    requires = ("entropies",)

    def __init__(
        self, items: Sequence[dict], seed: int = 0, *, sample_keep_start: float = 0.5, sample_keep_end: float = 1.0,
        token_keep_start: float = 0.2, token_keep_end: float = 1.0, anneal_steps: int = 100,
        schedule: Literal["linear", "cosine"] = "linear", scope: Literal["batch", "group"] = "batch",
        token_scope: Literal["sequence", "batch"] = "sequence", eps: float = 1e-6,
    ):  # fmt: skip
        super().__init__(items, seed)
        for name, v in (("sample_keep_start", sample_keep_start), ("sample_keep_end", sample_keep_end),
                        ("token_keep_start", token_keep_start), ("token_keep_end", token_keep_end)):  # fmt: skip
            if not 0.0 < v <= 1.0:
                raise ValueError(f"sampler d3s: {name} must be in (0, 1], got {v}")
        if anneal_steps < 0 or schedule not in ("linear", "cosine") or scope not in ("batch", "group"):
            raise ValueError("sampler d3s: anneal_steps >= 0, schedule 'linear'|'cosine', scope 'batch'|'group'")
        if token_scope not in ("sequence", "batch"):
            raise ValueError(f"sampler d3s: token_scope must be 'sequence' or 'batch', got {token_scope!r}")
        self.rho_s = (sample_keep_start, sample_keep_end)
        self.rho_t = (token_keep_start, token_keep_end)
        self.anneal_steps, self.schedule, self.scope, self.token_scope, self.eps = anneal_steps, schedule, scope, token_scope, eps
        self.t = 0

    def ratios(self) -> tuple[float, float]:
        """(rho_s, rho_t) for the next observed batch."""
        return (annealed(*self.rho_s, self.t, self.anneal_steps, self.schedule),
                annealed(*self.rho_t, self.t, self.anneal_steps, self.schedule))  # fmt: skip

    def select(self, adv: Tensor, group: Tensor, entropies: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """(rows kept [N] bool, tokens kept [N, T] bool) for advantages `adv` [N] and entropies [N, T]."""
        rho_s, rho_t = self.ratios()
        n = adv.numel()
        keep = torch.zeros(n, dtype=torch.bool)
        if self.scope == "batch":
            keep[max_variance_subset(adv, math.ceil(rho_s * n))] = True
        else:
            for g in torch.unique(group).tolist():
                rows = torch.nonzero(group == g).flatten()
                keep[rows[max_variance_subset(adv[rows], math.ceil(rho_s * rows.numel()))]] = True
        row_mask = mask * keep[:, None].to(mask.dtype)
        tokens = top_tokens(adv.abs()[:, None].double() * entropies.double(), row_mask, rho_t, self.token_scope)
        return keep, tokens

    def observe(self, batch: Rollouts) -> Feedback:
        if batch.entropies is None:
            raise ValueError(
                "sampler d3s needs rollouts.entropies (token entropies of the sampling distribution) but the batch "
                "has none: the trainer requests them through D3SSampler.requires; a custom strategy must keep them"
            )
        rho_s, rho_t = self.ratios()
        adv = _grpo_advantages(batch.scalar_rewards().double().cpu(), batch.group.cpu(), self.eps)
        mask = batch.completion_mask.cpu()
        before = float(mask.sum())
        keep, tokens = self.select(adv, batch.group.cpu(), batch.entropies.cpu(), mask)
        self.t += 1
        metrics = {
            "sampler/d3s/sample_keep": rho_s,
            "sampler/d3s/token_keep": rho_t,
            "sampler/d3s/rows_kept_frac": float(keep.double().mean()),
            "sampler/d3s/tokens_kept_frac": float(kept_mask(mask, keep, tokens).sum()) / max(before, 1.0),
        }
        return Feedback(metrics, keep_rows=keep, keep_tokens=tokens)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "t": self.t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.t = state["t"]
