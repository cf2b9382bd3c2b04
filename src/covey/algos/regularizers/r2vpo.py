"""R2VPO's ratio-variance constraint with its dual variable (UNVERIFIED reconstruction)."""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from covey.algos.regularizers.base import Regularizer, RegularizerCaps, register_regularizer
from covey.algos.registry import BatchTotals, LossInputs

NonNeg = Annotated[float, Field(ge=0.0)]
Positive = Annotated[float, Field(gt=0.0)]


@register_regularizer(
    "r2vpo_provisional",
    paper="Ratio-Variance Regularized Policy Optimization (UNVERIFIED reconstruction)",
    arxiv="2601.03320",
    caps=RegularizerCaps(old_policy_trust_region=True),
)  # fmt: skip
class R2VPO(Regularizer):
    """lambda * Var_tok(ratio) with a primal-dual update of lambda. Returns a scalar.

    Paper: arXiv 2601.03320. UNVERIFIED: no code and no equations read;
    the abstract's mechanism (a constraint on the variance of the policy ratio, enforced primal-dual,
    replacing the hard clip) in covey's form:

        r      = exp(clamp(logp - old_logp, +-log_ratio_clamp))
        Var    = token mean over the mini-batch of (r - rbar)^2,  rbar = sg(token mean of r)   (pre-pass)
        reg    = lambda * Var
        dual   : lambda <- max(0, lambda + eta (Var - delta))   after each optimizer step

    With rbar detached the gradient is the variance's own (the mean term's gradient sums to 0);
    rbar comes from a no-grad pre-pass over the mini-batch, so micro-batching changes nothing. Pair
    with surrogate `r2vpo_provisional` (the unclipped ratio term) and aggregation `token-mean`.
    Suggested defaults (not the paper's): lambda0 0, eta 1, delta 0.01. lambda is saved in
    checkpoints. Metrics: loss, lambda (the value used); after each optimizer step ratio_var and lambda_next.
    """

    prepass = True

    def __init__(self, *, lambda0: NonNeg = 0.0, eta: NonNeg = 1.0, delta: NonNeg = 0.01, log_ratio_clamp: Positive = 20.0):
        self.lam, self.eta, self.delta, self.clamp = float(lambda0), eta, delta, log_ratio_clamp
        self._sum = 0.0  # pre-pass: sum of r over the mini-batch's tokens
        self._var = 0.0  # this mini-batch's Var, accumulated over micro-batches

    def ratio(self, inp: LossInputs):
        return torch.exp((inp.logp - inp.old_logp).clamp(-self.clamp, self.clamp))

    def begin(self) -> None:
        self._sum = self._var = 0.0

    def observe(self, inp: LossInputs, totals: BatchTotals) -> None:
        self._sum += float((self.ratio(inp).detach() * inp.mask).sum())

    def __call__(self, inp: LossInputs, totals: BatchTotals):
        n = max(totals.num_tokens, 1.0)
        rbar = self._sum / n
        var = ((self.ratio(inp) - rbar).pow(2) * inp.mask).sum() / n
        self._var += float(var.detach())
        reg = self.lam * var
        return reg, {"loss": float(reg.detach()), "lambda": self.lam}

    def after_step(self) -> dict[str, float]:
        self.lam = max(0.0, self.lam + self.eta * (self._var - self.delta))
        return {"ratio_var": self._var, "lambda_next": self.lam}

    def state_dict(self):
        return {"lambda": self.lam}

    def load_state_dict(self, state):
        if "lambda" in state:
            self.lam = float(state["lambda"])
