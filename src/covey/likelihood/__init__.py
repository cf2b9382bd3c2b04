"""covey.likelihood: sequence-likelihood estimators for masked-diffusion models (`algo.likelihood:`).

A masked-diffusion model has no autoregressive log-prob; the learner gets log pi(y | q) from one of
these estimators instead (`LIKELIHOODS`, docs/diffusion.md):

    d1_one_step       d1 / diffu-GRPO: every completion token masked, one forward, per-token values
    elbo_mc           LLaDA: Monte Carlo ELBO, mask counts stratified over the samples
    elbo_antithetic   ESPO: ELBO with the complementary mask (two forwards per sample)
    elbo_sdmc         GDPO: Gauss-Legendre nodes over t, Bernoulli masks at each node

The masks of a row depend only on the row (prompt, completion, policy version of its tokens) and
the sample index, so the current, old and reference models see the same masks (common random
numbers): at unchanged weights the ratio is exactly 1.
"""

from covey.likelihood import estimators  # noqa: F401  (fill the registry)
from covey.likelihood.canvas import Canvas, estimate, mc_samples, model_canvas, row_seeds
from covey.likelihood.registry import LIKELIHOODS, LogLik, register_likelihood

__all__ = ["LIKELIHOODS", "Canvas", "LogLik", "estimate", "mc_samples", "model_canvas", "register_likelihood", "row_seeds"]
