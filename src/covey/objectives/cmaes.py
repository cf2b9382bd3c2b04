"""CMA-ES, the (mu/mu_w, lambda) covariance matrix adaptation evolution strategy, maximising a fitness.

As in N. Hansen, "The CMA Evolution Strategy: A Tutorial" (arXiv 1604.00772), Table 1 and Fig. 6 with
positive recombination weights only (the classic form):

    lambda = 4 + floor(3 ln n)          mu = floor(lambda / 2)
    w_i    = ln((lambda + 1) / 2) - ln i, i <= mu, normalised to sum 1;   mu_eff = 1 / sum w_i^2
    c_sigma = (mu_eff + 2) / (n + mu_eff + 5)
    d_sigma = 1 + 2 max(0, sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma
    c_c     = (4 + mu_eff / n) / (n + 4 + 2 mu_eff / n)
    c_1     = 2 / ((n + 1.3)^2 + mu_eff)
    c_mu    = min(1 - c_1, 2 (mu_eff - 2 + 1 / mu_eff) / ((n + 2)^2 + mu_eff))
    E|N(0, I)| = sqrt(n) (1 - 1 / (4 n) + 1 / (21 n^2))

    ask:   z_k ~ N(0, I), y_k = B D z_k, x_k = m + sigma y_k                      (C = B D^2 B^T)
    tell:  y_w = sum_i w_i y_{i:lambda}  (the best mu, by fitness, descending)
           m <- m + sigma y_w
           p_sigma <- (1 - c_sigma) p_sigma + sqrt(c_sigma (2 - c_sigma) mu_eff) C^{-1/2} y_w
           h_sigma = 1 if |p_sigma| / sqrt(1 - (1 - c_sigma)^(2 (g + 1))) < (1.4 + 2 / (n + 1)) E|N| else 0
           p_c <- (1 - c_c) p_c + h_sigma sqrt(c_c (2 - c_c) mu_eff) y_w
           C <- (1 - c_1 - c_mu + (1 - h_sigma) c_1 c_c (2 - c_c)) C + c_1 p_c p_c^T + c_mu sum_i w_i y_i y_i^T
           sigma <- sigma exp((c_sigma / d_sigma) (|p_sigma| / E|N| - 1))

Everything is float64 on the CPU; the state is a dict of tensors and numbers (`state_dict`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["CMAES", "cma_constants"]

F64 = torch.float64


def cma_constants(n: int, population: int = 0) -> dict[str, Any]:
    """The default strategy parameters for dimension n (population 0: the default lambda)."""
    if n < 1:
        raise ValueError(f"CMA-ES needs a dimension >= 1, got {n}")
    lam = population or 4 + int(math.floor(3 * math.log(n)))
    if lam < 2:
        raise ValueError(f"CMA-ES needs a population >= 2, got {lam}")
    mu = lam // 2
    w = torch.tensor([math.log((lam + 1) / 2) - math.log(i) for i in range(1, mu + 1)], dtype=F64)
    w = w / w.sum()
    mu_eff = float(1.0 / (w**2).sum())
    c_sigma = (mu_eff + 2) / (n + mu_eff + 5)
    d_sigma = 1 + 2 * max(0.0, math.sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma
    c_c = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n)
    c_1 = 2 / ((n + 1.3) ** 2 + mu_eff)
    c_mu = min(1 - c_1, 2 * (mu_eff - 2 + 1 / mu_eff) / ((n + 2) ** 2 + mu_eff))
    chi_n = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    return {"lam": lam, "mu": mu, "weights": w, "mu_eff": mu_eff, "c_sigma": c_sigma, "d_sigma": d_sigma, "c_c": c_c,
            "c_1": c_1, "c_mu": c_mu, "chi_n": chi_n}  # fmt: skip


class CMAES:
    """A CMA-ES over a vector (module docstring); `ask` then `tell` with the fitness of each candidate."""

    def __init__(self, mean: Tensor, sigma: float, population: int = 0):
        if not sigma > 0:
            raise ValueError(f"CMA-ES needs sigma > 0, got {sigma}")
        self.mean = mean.detach().to(F64).flatten().clone()
        self.n = int(self.mean.numel())
        self.k = cma_constants(self.n, population)
        self.sigma = float(sigma)
        self.C = torch.eye(self.n, dtype=F64)
        self.p_sigma = torch.zeros(self.n, dtype=F64)
        self.p_c = torch.zeros(self.n, dtype=F64)
        self.generation = 0
        self._eig()

    @property
    def population(self) -> int:
        return self.k["lam"]

    def _eig(self) -> None:
        self.C = (self.C + self.C.T) / 2
        d2, b = torch.linalg.eigh(self.C)
        self.B, self.D = b, d2.clamp(min=1e-20).sqrt()

    def ask(self, generator: torch.Generator) -> Tensor:
        """[lambda, n] candidates x_k = m + sigma B D z_k."""
        z = torch.randn(self.population, self.n, generator=generator, dtype=F64)
        self._y = z @ (self.B * self.D).T  # [lambda, n]: y_k = B D z_k
        return self.mean + self.sigma * self._y

    def tell(self, candidates: Tensor, fitness: Tensor) -> None:
        """Update from the candidates of the last `ask` and their fitness [lambda] (larger is better)."""
        k, n = self.k, self.n
        if tuple(candidates.shape) != (self.population, n) or fitness.numel() != self.population:
            raise ValueError(f"CMA-ES tell: {self.population} candidates of dimension {n} and their fitness, got "
                             f"{tuple(candidates.shape)} and {fitness.numel()}")  # fmt: skip
        if not bool(torch.isfinite(fitness).all()):
            raise ValueError("CMA-ES tell: the fitness holds NaN/inf")
        y = (candidates.to(F64) - self.mean) / self.sigma
        best = torch.argsort(fitness.to(F64), descending=True, stable=True)[: k["mu"]]
        y_sel = y[best]
        y_w = k["weights"] @ y_sel
        self.mean = self.mean + self.sigma * y_w
        inv_sqrt = self.B @ torch.diag(1.0 / self.D) @ self.B.T
        cs, cc, c1, cmu, mue = k["c_sigma"], k["c_c"], k["c_1"], k["c_mu"], k["mu_eff"]
        self.p_sigma = (1 - cs) * self.p_sigma + math.sqrt(cs * (2 - cs) * mue) * (inv_sqrt @ y_w)
        norm = float(self.p_sigma.norm())
        h = float(norm / math.sqrt(1 - (1 - cs) ** (2 * (self.generation + 1))) < (1.4 + 2 / (n + 1)) * k["chi_n"])
        self.p_c = (1 - cc) * self.p_c + h * math.sqrt(cc * (2 - cc) * mue) * y_w
        rank_mu = (y_sel.T * k["weights"]) @ y_sel  # sum_i w_i y_i y_i^T
        self.C = (1 - c1 - cmu + (1 - h) * c1 * cc * (2 - cc)) * self.C + c1 * torch.outer(self.p_c, self.p_c) + cmu * rank_mu
        self.sigma *= math.exp((cs / k["d_sigma"]) * (norm / k["chi_n"] - 1))
        self.generation += 1
        self._eig()

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.clone(), "sigma": self.sigma, "C": self.C.clone(), "p_sigma": self.p_sigma.clone(),
                "p_c": self.p_c.clone(), "generation": self.generation, "population": self.population}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.sigma, self.C = state["mean"].clone(), float(state["sigma"]), state["C"].clone()
        self.p_sigma, self.p_c, self.generation = state["p_sigma"].clone(), state["p_c"].clone(), int(state["generation"])
        self.k = cma_constants(self.n, int(state["population"]))
        self._eig()
