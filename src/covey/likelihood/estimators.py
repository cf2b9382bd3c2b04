"""The sequence-likelihood estimators (`LIKELIHOODS`); formulas in docs/diffusion.md.

Each is ``fn(canvas, *, **params) -> LogLik``. Notation: L completion tokens per row, `score(mask)`
the model's log-prob of every true token given the canvas with `mask` positions masked.
A linear toy model (every masked token's log-prob is -a - b m / L when m are masked) has
ELBO = -a L - b (L + 1) / 2; tests/likelihood checks every estimator's mean and variance on it.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from covey.likelihood.canvas import Canvas
from covey.likelihood.registry import LikelihoodCaps, LogLik, register_likelihood

__all__ = ["d1_one_step", "elbo_antithetic", "elbo_double_mc", "elbo_mc", "elbo_sdmc", "gauss_legendre"]

Prob = Annotated[float, Field(ge=0.0, lt=1.0)]
Count = Annotated[int, Field(ge=1, le=4096)]


def _masks(canvas: Canvas, counts: list[int], *key) -> Tensor:
    """[N, L] bool: row i has counts[i] masked positions chosen by a random permutation."""
    out = torch.zeros(canvas.n, canvas.length, dtype=torch.bool)
    for i, k in enumerate(counts):
        out[i, torch.randperm(canvas.length, generator=canvas.rng(i, *key))[:k]] = True
    return out


def _broadcast(canvas: Canvas, elbo: Tensor, samples: int) -> LogLik:
    """ELBO_i / L on every token of row i."""
    return LogLik((elbo / canvas.length)[:, None].expand(canvas.n, canvas.length), samples)


def _which(canvas: Canvas, m: int) -> list[int]:
    return list(range(m)) if canvas.sample is None else [canvas.sample]


@register_likelihood("d1_one_step", paper="d1: Scaling Reasoning in Diffusion Large Language Models via RL", arxiv="2504.12216")
def d1_one_step(canvas: Canvas, *, p_mask_prompt: Prob = 0.15) -> LogLik:
    """diffu-GRPO's one-step per-token log-probs: all completion tokens masked, one forward.

    Each prompt token is also masked with probability p_mask_prompt (a mean-field estimate: it
    ignores dependencies between completion tokens). Checked against dllm-reasoning/d1
    `diffu-grpo/diffu_grpo_trainer.py` (forward_process, _get_per_token_logps; commit 837888f22c21)."""
    prompt_mask = None
    if p_mask_prompt > 0:
        prompt_mask = [torch.rand(pl, generator=canvas.rng(i, "d1_prompt")) < p_mask_prompt
                       for i, pl in enumerate(canvas.prompt_lengths)]  # fmt: skip
    full = torch.ones(canvas.n, canvas.length, dtype=torch.bool)
    return LogLik(canvas.score(full, prompt_mask), 1)


@register_likelihood("elbo_mc", paper="Large Language Diffusion Models (LLaDA)", arxiv="2502.09992")
def elbo_mc(canvas: Canvas, *, mc_num: Count = 1, stratified: bool = True) -> LogLik:
    """LLaDA's Monte Carlo ELBO: k ~ U{1..L} masked tokens per sample, weight L / k.

    Sample j masks k_j of the L tokens (random positions) and scores (L / k_j) * sum of the masked log-probs; the estimate is the mean over the mc_num samples.
    stratified: k_0 ~ U{1..L} once per row, k_j = round(k_0 + j L / mc_num) wrapped to 1..L (LLaDA's
    linspace over the copies of one sequence); else each k_j ~ U{1..L}. Checked against
    ML-GSAI/LLaDA `get_log_likelihood.py` (commit b7e6c3565f19); the per-sample form is BGPO's
    `_forward_process_bgpo` as a third-party port is described (not read here)."""
    length = canvas.length
    k0 = [int(torch.randint(1, length + 1, (), generator=canvas.rng(i, "elbo_mc_k"))) for i in range(canvas.n)]
    total = 0.0
    for j in _which(canvas, mc_num):
        if stratified:
            counts = [(round(k + j * length / mc_num) - 1) % length + 1 for k in k0]
        else:
            counts = [int(torch.randint(1, length + 1, (), generator=canvas.rng(i, "elbo_mc_k", j))) for i in range(canvas.n)]
        mask = _masks(canvas, counts, "elbo_mc", j)
        lp = canvas.score(mask, None)
        weight = length / torch.tensor(counts, dtype=torch.float32, device=lp.device)
        total = total + (lp * mask.to(lp.device)).sum(-1) * weight
    m = len(_which(canvas, mc_num))
    return _broadcast(canvas, total / m, m)


elbo_mc.caps = LikelihoodCaps(mc_samples=lambda params: params["mc_num"])


@register_likelihood("elbo_antithetic", paper="ESPO: sequence-level ELBO policy optimization", arxiv="2512.03759")
def elbo_antithetic(canvas: Canvas, *, num_mc: Count = 1) -> LogLik:
    """ESPO's antithetic ELBO: a mask and its complement, two forwards per sample.

    ESPO's `reduce_var=True`: k ~ U{0..L} tokens masked with weight
    (L + 1) / k, plus the complementary mask (the other L - k tokens masked) with weight
    (L + 1) / (L - k); the two sums averaged; mean over num_mc samples (two forwards each). ESPO
    stratifies k across the rows of a batch with one shared offset; covey draws k per row (its
    masks must not depend on the batch, for common random numbers) and stratifies across a row's
    num_mc samples. Checked against ML-GSAI/ESPO `espo/espo_trainer.py` (forward_process, _get_elbo;
    commit b5f2dac4c540)."""
    length = canvas.length
    k0 = [int(torch.randint(0, length + 1, (), generator=canvas.rng(i, "espo_k"))) for i in range(canvas.n)]
    total = 0.0
    for j in _which(canvas, num_mc):
        counts = [round(k + j * (length + 1) / num_mc) % (length + 1) for k in k0]
        mask = _masks(canvas, counts, "espo", j)
        k = torch.tensor(counts, dtype=torch.float32)
        lp = canvas.score(mask, None)
        dev = lp.device
        w_in = torch.where(k > 0, (length + 1) / k.clamp(min=1), torch.zeros_like(k)).to(dev)
        w_out = torch.where(k < length, (length + 1) / (length - k).clamp(min=1), torch.zeros_like(k)).to(dev)
        lp_c = canvas.score(~mask, None)
        inside = (lp * mask.to(dev)).sum(-1) * w_in
        outside = (lp_c * (~mask).to(dev)).sum(-1) * w_out
        total = total + (inside + outside) / 2
    m = len(_which(canvas, num_mc))
    return _broadcast(canvas, total / m, m)


elbo_antithetic.caps = LikelihoodCaps(mc_samples=lambda params: params["num_mc"])


def gauss_legendre(n: int) -> tuple[list[float], list[float]]:
    """Gauss-Legendre nodes and weights on [0, 1]: N = 2 -> t 0.211325, 0.788675, w 0.5 each."""
    x, w = np.polynomial.legendre.leggauss(n)
    return [float((a + 1) / 2) for a in x], [float(b / 2) for b in w]


@register_likelihood("elbo_sdmc", paper="GDPO: Improving Reasoning for Diffusion Language Models via Group Diffusion Policy Optimization",
                     arxiv="2510.08554")  # fmt: skip
def elbo_sdmc(canvas: Canvas, *, nodes: Count = 3, masks_per_node: Count = 1) -> LogLik:
    """GDPO's semi-deterministic Monte Carlo ELBO: Gauss-Legendre nodes over t, random masks.

    The integral over t in [0, 1] by Gauss-Legendre quadrature (t_n, w_n), the expectation over masks by masks_per_node Bernoulli(t_n) masks per
    node: sum_n w_n (1/K) sum_masks (1/t_n) sum_masked log pi (nodes x masks_per_node forwards).
    RECONSTRUCTED from the paper's abstract and project page (no code was reachable): N, K and the
    exact mask draw are covey's choices (defaults N = 3, K = 1, UNVERIFIED)."""
    ts, ws = gauss_legendre(nodes)
    pairs = [(a, b) for a in range(nodes) for b in range(masks_per_node)]
    chosen = pairs if canvas.sample is None else [pairs[canvas.sample]]
    total = 0.0
    for a, b in chosen:
        t = ts[a]
        mask = torch.stack([torch.rand(canvas.length, generator=canvas.rng(i, "sdmc", a, b)) < t for i in range(canvas.n)])
        lp = canvas.score(mask, None)
        # one sample of the mean: weight w_n / K for the full estimate; a single term stands for the sum
        scale = ws[a] / masks_per_node if canvas.sample is None else ws[a] * nodes
        total = total + scale / t * (lp * mask.to(lp.device)).sum(-1)
    return _broadcast(canvas, total, len(chosen))


elbo_sdmc.caps = LikelihoodCaps(mc_samples=lambda params: params["nodes"] * params["masks_per_node"])


@register_likelihood("elbo_double_mc", paper="GDPO (the baseline it calls variance explosion)", arxiv="2510.08554")
def elbo_double_mc(canvas: Canvas, *, mc_num: Count = 1) -> LogLik:
    """The naive double Monte Carlo ELBO: t ~ U(0, 1), one Bernoulli(t) mask, weight 1 / t.

    Unbiased, but for small t the one masked token carries weight 1/t with probability ~L t, so
    E[estimate^2] grows like the integral of dt / t (logarithmically in the smallest t drawn): the
    "variance explosion" GDPO's quadrature over t removes. Here as the baseline of that claim (docs/diffusion.md)."""
    total = 0.0
    for j in _which(canvas, mc_num):
        ts = [float(torch.rand((), generator=canvas.rng(i, "dmc_t", j))) for i in range(canvas.n)]
        mask = torch.stack([torch.rand(canvas.length, generator=canvas.rng(i, "dmc", j)) < ts[i] for i in range(canvas.n)])
        lp = canvas.score(mask, None)
        t = torch.tensor(ts, dtype=torch.float32, device=lp.device).clamp(min=1e-6)
        total = total + (lp * mask.to(lp.device)).sum(-1) / t
    m = len(_which(canvas, mc_num))
    return _broadcast(canvas, total / m, m)


elbo_double_mc.caps = LikelihoodCaps(mc_samples=lambda params: params["mc_num"])
