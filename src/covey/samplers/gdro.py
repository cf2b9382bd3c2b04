"""`gdro`: group-DRO over difficulty bins -- Prompt-GDRO sampling weights, optional Rollout-GDRO allocation.

Paper: "Group Distributionally Robust Optimization-Driven Reinforcement Learning for LLM Reasoning",
arXiv 2601.19280 (Panaganti et al., Tencent AI Lab). Its abstract (read) confirms: an online
difficulty classifier puts prompts into dynamic pass@k bins; Prompt-GDRO reweights prompt sampling
over bins with an EMA-debiased multiplicative-weights (exponentiated-gradient) adversary; Rollout-GDRO
shares out rollouts across bins under a fixed mean budget with a shadow-price controller, motivated by
a square-root optimal allocation. The exact update, bin edges, step sizes, EMA constants and the
controller are UNVERIFIED: covey uses the standard group-DRO update of Sagawa et al. 2020
("Distributionally Robust Neural Networks", arXiv 1911.08731) on these bins:

    bins:     prompt pass rate p (`feedback.row_success` mean at its last visit) -> bin min(floor(p*K), K-1);
              never-seen prompts form bin K (K = `bins`)
    observe:  L_b = 1 - mean_{prompts of bin b this step} p      (score "error", Sagawa's loss)
                 or mean p (1 - p)                               (score "variance", the learning frontier)
              EMA debiasing: m_b <- beta m_b + (1 - beta) L_b;  Lhat_b = m_b / (1 - beta^c_b)
              (c_b = updates of bin b); every bin with c_b > 0 gets one update per step, so a
              frequently drawn bin does not gain weight from its frequency
              log q_b <- log q_b + eta Lhat_b;  q <- q / sum q               (exponentiated gradient)
    next:     each slot picks bin b with prob (1 - gamma) q_b + gamma / |non-empty bins| (over non-empty
              bins), then a prompt of that bin uniformly (without repeats inside one call when possible)
    rollouts "sqrt" (Rollout-GDRO, UNVERIFIED form): n_i = clip(lambda sigma_i, n_min, n_max) with
              sigma_i = sqrt(pbar_b (1 - pbar_b)) of the prompt's bin (unseen: 0.5) and lambda (1/shadow
              price) set by bisection so sum n_i = B*G; integers by largest remainder. "fixed": G each.

Fidelity (re-read 2026-11-24): reconstructed. No released code was found for arXiv 2601.19280;
everything beyond the abstract is the Sagawa et al. update named above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch

from covey.samplers.base import BaseSampler, Draw, Feedback, register_sampler
from covey.samplers.feedback import ItemIndex, draw_generator, prompt_outcomes
from covey.rollouts import Rollouts

__all__ = ["GDROSampler", "difficulty_bins", "ema_debiased", "mirror_step", "sqrt_allocation"]


def difficulty_bins(rates: torch.Tensor, k: int) -> torch.Tensor:
    """[n] long bin of each pass rate: floor(p k) capped at k - 1; NaN (unseen) -> k."""
    r = rates.double()
    b = torch.clamp(torch.floor(torch.nan_to_num(r, nan=0.0) * k), 0, k - 1).long()
    return torch.where(torch.isnan(r), torch.full_like(b, k), b)


def ema_debiased(m: torch.Tensor, c: torch.Tensor, loss: torch.Tensor, seen: torch.Tensor, beta: float):
    """One EMA step on the bins in `seen`: (m, c, Lhat) with Lhat = m / (1 - beta^c) (0 where c = 0)."""
    m = torch.where(seen, beta * m + (1 - beta) * loss, m)
    c = c + seen.long()
    lhat = torch.where(c > 0, m / (1 - beta ** c.double()).clamp(min=1e-12), torch.zeros_like(m))
    return m, c, lhat


def mirror_step(logq: torch.Tensor, lhat: torch.Tensor, active: torch.Tensor, eta: float) -> torch.Tensor:
    """log q + eta Lhat on the active bins, renormalised (log-sum-exp)."""
    out = logq + eta * torch.where(active, lhat, torch.zeros_like(lhat))
    return out - torch.logsumexp(out, 0)


def sqrt_allocation(sigma: Sequence[float], budget: int, n_min: int, n_max: int) -> tuple[list[int], float]:
    """(rollouts per prompt summing to `budget`, lambda): n_i = clip(lambda sigma_i, n_min, n_max), rounded."""
    s = torch.tensor(list(sigma), dtype=torch.float64)
    b = s.numel()
    if not n_min * b <= budget <= n_max * b:
        raise ValueError(f"gdro cannot share {budget} rollouts over {b} prompts with {n_min}..{n_max} each")

    def total(lam: float) -> torch.Tensor:
        return torch.clamp(lam * s, n_min, n_max)

    if float(s.max()) <= 0 or float(total(1e18).sum()) < budget:  # nothing (or not enough) to weight by
        x = torch.where(s > 0, torch.full_like(s, float(n_max)), torch.full_like(s, float(n_min)))
        spare, zero = budget - float(x.sum()), s <= 0
        x = x + torch.where(zero, torch.full_like(s, spare / max(int(zero.sum()), 1)), torch.zeros_like(s))
        lam = math.inf
    else:
        lo, hi = 0.0, 1.0
        while float(total(hi).sum()) < budget:
            hi *= 2.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if float(total(mid).sum()) < budget else (lo, mid)
        lam, x = hi, total(hi)
    n = torch.floor(x + 1e-9).long().clamp(n_min, n_max)
    frac = x - n.double()
    for i in torch.argsort(-frac, stable=True).tolist():
        if int(n.sum()) >= budget:
            break
        if n[i] < n_max:
            n[i] += 1
    while int(n.sum()) > budget:  # rounding overshoot (only from the 1e-9 slack): take back from the largest
        n[int(torch.argmax(n))] -= 1
    return n.tolist(), lam


@register_sampler("gdro")
class GDROSampler(BaseSampler):
    """Prompt-GDRO (+ optional Rollout-GDRO) over pass-rate bins (see the module docstring).

    bins: K difficulty bins (plus one for unseen prompts).   eta: exponentiated-gradient step.
    beta: EMA of the bin losses.   gamma: uniform mixing of the sampling distribution, in [0, 1].
    score: "error" (1 - p) or "variance" (p (1 - p)).
    rollouts: "fixed" (G each) or "sqrt" (Rollout-GDRO); min_rollouts / max_rollouts bound it (None: 2 G).
    """

    def __init__(
        self, items: Sequence[dict], seed: int = 0, *, bins: int = 4, eta: float = 0.1, beta: float = 0.9,
        gamma: float = 0.1, score: Literal["error", "variance"] = "error", rollouts: Literal["fixed", "sqrt"] = "fixed",
        min_rollouts: int = 2, max_rollouts: int | None = None,
    ):  # fmt: skip
        super().__init__(items, seed)
        if bins < 1 or eta < 0 or not 0.0 <= beta < 1.0 or not 0.0 <= gamma <= 1.0 or min_rollouts < 1:
            raise ValueError(f"sampler gdro needs bins >= 1, eta >= 0, 0 <= beta < 1, 0 <= gamma <= 1, min_rollouts >= 1; "
                             f"got {bins}, {eta}, {beta}, {gamma}, {min_rollouts}")  # fmt: skip
        if score not in ("error", "variance") or rollouts not in ("fixed", "sqrt"):
            raise ValueError(f"sampler gdro: score must be 'error'|'variance' and rollouts 'fixed'|'sqrt', got {score!r}, {rollouts!r}")
        self.k, self.eta, self.beta, self.gamma, self.score = bins, eta, beta, gamma, score
        self.rollouts, self.min_rollouts, self.max_rollouts = rollouts, min_rollouts, max_rollouts
        self.index = ItemIndex(items)
        self.rates = torch.full((len(items),), math.nan, dtype=torch.float64)
        self.logq = torch.full((bins + 1,), -math.log(bins + 1), dtype=torch.float64)
        self.m = torch.zeros(bins + 1, dtype=torch.float64)
        self.c = torch.zeros(bins + 1, dtype=torch.long)
        self.draws = 0
        self.drawn_bin: dict[int, int] = {}  # item id -> its bin when drawn (credited in observe)
        self.shadow_price = 0.0

    def probabilities(self) -> torch.Tensor:
        """[K+1] sampling probability of each bin now (0 for empty bins)."""
        counts = torch.bincount(difficulty_bins(self.rates, self.k), minlength=self.k + 1)
        nonempty = counts > 0
        q = torch.where(nonempty, self.logq.exp(), torch.zeros_like(self.logq))
        q = q / q.sum() if float(q.sum()) > 0 else nonempty.double() / nonempty.sum()
        return (1 - self.gamma) * q + self.gamma * nonempty.double() / nonempty.sum()

    def next(self, k: int, group_size: int) -> list[Draw]:
        gen = draw_generator(self.seed, "gdro", self.draws)
        self.draws += 1
        bins = difficulty_bins(self.rates, self.k)
        p = self.probabilities()
        taken: set[int] = set()
        out = []
        for b in torch.multinomial(p, k, replacement=True, generator=gen).tolist():
            members = torch.nonzero(bins == b).flatten()
            free = torch.tensor([i for i in members.tolist() if i not in taken], dtype=torch.long)
            pick = free if free.numel() else members
            i = int(pick[torch.randint(pick.numel(), (1,), generator=gen)])
            taken.add(i)
            self.drawn_bin[int(self.items[i]["id"])] = b
            out.append(self.items[i])
        return [Draw(it, n) for it, n in zip(out, self.allocate(out, group_size))]

    def allocate(self, items: list[dict], group_size: int) -> list[int]:
        """Rollouts for each of `items` (G = `group_size`): G each ("fixed"), or Rollout-GDRO's split of B*G."""
        if self.rollouts == "fixed":
            return [group_size] * len(items)
        cap = self.max_rollouts if self.max_rollouts is not None else 2 * group_size
        bins = difficulty_bins(self.rates, self.k)
        pbar = [float(self.rates[bins == b].mean()) if b < self.k and bool((bins == b).any()) else 0.5 for b in range(self.k + 1)]
        pos = self.index.positions(torch.tensor([int(it["id"]) for it in items]))
        sigma = [math.sqrt(pbar[int(bins[i])] * (1 - pbar[int(bins[i])])) for i in pos.tolist()]
        sizes, lam = sqrt_allocation(sigma, group_size * len(items), min(self.min_rollouts, group_size), max(cap, group_size))
        self.shadow_price = 0.0 if math.isinf(lam) else 1.0 / lam
        return sizes

    def observe(self, batch: Rollouts) -> Feedback:
        ids, succ, count = prompt_outcomes(batch)
        p = succ / count
        pos = self.index.positions(ids)
        cur = difficulty_bins(self.rates[pos], self.k)
        b = torch.tensor([self.drawn_bin.pop(key, int(cb)) for key, cb in zip(ids.tolist(), cur.tolist())], dtype=torch.long)
        per = (1 - p) if self.score == "error" else p * (1 - p)
        tot = torch.zeros(self.k + 1, dtype=torch.float64).index_add_(0, b, per)
        cnt = torch.zeros(self.k + 1, dtype=torch.float64).index_add_(0, b, torch.ones_like(per))
        seen = cnt > 0
        self.m, self.c, lhat = ema_debiased(self.m, self.c, tot / cnt.clamp(min=1), seen, self.beta)
        self.logq = mirror_step(self.logq, lhat, self.c > 0, self.eta)
        self.rates[pos] = p
        q = self.logq.exp()
        out = {f"sampler/gdro/q_bin{i}": float(q[i]) for i in range(self.k)}
        out["sampler/gdro/q_unseen"] = float(q[self.k])
        if self.rollouts == "sqrt":
            out["sampler/gdro/shadow_price"] = self.shadow_price
        return Feedback(out)

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "rates": self.rates.clone(), "logq": self.logq.clone(), "m": self.m.clone(),
                "c": self.c.clone(), "draws": self.draws, "drawn_bin": dict(self.drawn_bin)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["rates"].numel() != len(self.items) or state["logq"].numel() != self.k + 1:
            raise ValueError("sampler gdro: the checkpoint's prompt count or number of bins differs from this run's")
        self.seed, self.draws = state["seed"], state["draws"]
        self.rates, self.logq, self.m, self.c = (state[k].clone() for k in ("rates", "logq", "m", "c"))
        self.drawn_bin = {int(k): int(v) for k, v in state["drawn_bin"].items()}
