"""The `LIKELIHOODS` registry (`algo.likelihood: {name, ...}`) and what an estimator returns."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from collections.abc import Callable

from covey.registry import Caps, Registry

__all__ = ["LIKELIHOODS", "LikelihoodCaps", "LogLik", "register_likelihood"]


@dataclass
class LogLik:
    """token_logp [N, L] float32: per-token log-probs (d1_one_step), or a sequence estimator's
    ELBO_i / L on every token of row i (so the token-level PPO ratio is ESPO's sequence ratio
    exp((ELBO - ELBO_old) / L)). samples: how many Monte Carlo samples it averaged."""

    token_logp: Tensor
    samples: int = 1


class LikelihoodCaps(Caps):
    """What an estimator declares (its `caps`).

    mc_samples:  mc_samples(params) -> how many Monte Carlo samples it draws (separate forwards for a
                 `per_mc` surrogate); None: one.
    """

    mc_samples: Callable[[dict], int] | None = None


LIKELIHOODS = Registry(
    "likelihood", context=("canvas",), signature="fn(canvas: Canvas, *, **params) -> LogLik", defaults_required=True,
    caps=LikelihoodCaps,
)
register_likelihood = LIKELIHOODS.register
