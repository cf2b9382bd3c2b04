"""The `LIKELIHOODS` registry (`algo.likelihood: {name, ...}`) and what an estimator returns."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from covey.registry import Registry

__all__ = ["LIKELIHOODS", "LogLik", "register_likelihood"]


@dataclass
class LogLik:
    """token_logp [N, L] float32: per-token log-probs (d1_one_step), or a sequence estimator's
    ELBO_i / L on every token of row i (so the token-level PPO ratio is ESPO's sequence ratio
    exp((ELBO - ELBO_old) / L)). samples: how many Monte Carlo samples it averaged."""

    token_logp: Tensor
    samples: int = 1


LIKELIHOODS = Registry(
    "likelihood", context=("canvas",), signature="fn(canvas: Canvas, *, **params) -> LogLik", defaults_required=True
)
register_likelihood = LIKELIHOODS.register
