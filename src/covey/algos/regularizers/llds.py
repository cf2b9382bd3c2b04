"""LLDS: a likelihood-preserving penalty that acts only where a response's likelihood went down."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from covey.algos.regularizers.base import Regularizer, RegularizerCaps, as_float, register_regularizer
from covey.algos.registry import BatchTotals, LossInputs

NonNeg = Annotated[float, Field(ge=0.0)]


@register_regularizer(
    "llds",
    paper="Lazy Likelihood Displacement regularization, LLDS (PARTIAL: third-party gates; paper title not read)",
    arxiv="2512.04220",
    caps=RegularizerCaps(old_policy_trust_region=True),
)  # fmt: skip
class LLDS(Regularizer):
    """LLDS: penalise the drop of log-likelihood on tokens of non-negative-advantage responses whose
    likelihood decreased. Returns a scalar.

    Paper: arXiv 2512.04220 ("Lazy Likelihood Displacement"). Status PARTIAL: the structure ("activates only when a trajectory's likelihood decreases, and regularizes
    only the tokens responsible") is from the abstract; the three gates and the default coefficient
    are a third-party implementation (`compute_llds_loss`, torad-labs/verl fork); no authors' code.

        traj_i = 1[ mean_t logp_i < mean_t old_logp_i - tol ]       response likelihood decreased
        tok_it = 1[ logp_it < old_logp_it - tol ]                    this token was displaced down
        act_i  = 1[ mean_t A_it >= 0 ]                               (adv_gate="nonneg"; "all": 1)
        g_it   = traj_i tok_it act_i mask_it                         gates carry no gradient
        reg    = coef * sum_it g_it (old_logp_it - logp_it) / D
        D      = gated tokens of the whole mini-batch (norm="gated", a pre-pass when micro-batched;
                 the third-party code counts per micro-batch)  |  totals.num_tokens (norm="tokens")

    Defaults: coef 0.05 (third-party), tol 1e-8. D = 0 gives 0. On the first on-policy mini-batch
    logp = old_logp and the term is 0. Metrics: loss, gated_frac (gated / unmasked tokens).
    """

    def __init__(self, *, coef: NonNeg = 0.05, norm: Literal["gated", "tokens"] = "gated", tol: NonNeg = 1e-8,
                 adv_gate: Literal["nonneg", "all"] = "nonneg"):  # fmt: skip
        self.coef, self.norm, self.tol, self.adv_gate = coef, norm, tol, adv_gate
        self.prepass = norm == "gated"
        self._gated = 0.0

    def gates(self, inp: LossInputs):
        """g [N, T] float (no gradient)."""
        m = inp.mask
        lp = inp.logp.detach()
        length = m.sum(-1).clamp(min=1.0)
        traj = (lp * m).sum(-1) / length < (inp.old_logp * m).sum(-1) / length - self.tol
        tok = lp < inp.old_logp - self.tol
        g = traj[:, None] & tok & (m > 0)
        if self.adv_gate == "nonneg":
            g = g & ((inp.advantages * m).sum(-1) / length >= 0)[:, None]
        return g.to(lp.dtype)

    def begin(self) -> None:
        self._gated = 0.0

    def observe(self, inp: LossInputs, totals: BatchTotals) -> None:
        self._gated += float(self.gates(inp).sum())

    def __call__(self, inp: LossInputs, totals: BatchTotals):
        g = self.gates(inp)
        denom = self._gated if self.norm == "gated" else totals.num_tokens
        drop = (g * (inp.old_logp - inp.logp)).sum()
        reg = self.coef * drop / denom if denom > 0 else drop * 0.0
        return reg, {"loss": as_float(reg), "gated_frac": float(g.sum() / inp.mask.sum().clamp(min=1.0))}
