"""Loss aggregation: reduce a per-token loss [N, T] to the scalar the optimiser sees.

Every registered function has the AGGREGATIONS signature (see `covey.algos.registry`):

    fn(loss_tok [N, T], mask [N, T], totals: BatchTotals, *, **params) -> (scalar, metrics)

Like every axis it returns its metrics too; the built-in reductions have none to report ({}).

Parallelism invariance: every denominator comes from `totals`, the counts of the WHOLE optimisation
batch (all micro-batches, all ranks), never from the micro-batch at hand. So the aggregated losses
of the micro-batches add up to the full-batch value, and so do their gradients: the learner just
sums (no 1/grad_accum factor). Per-row quantities (L_i) are safe because a row never straddles
micro-batches. Rows with no unmasked token (L_i = 0) contribute 0 and are not counted in
`totals.num_seqs` (verl's `seq_mask = L_i > 0`).

Also here: `batch_totals` (build `BatchTotals` from a full-batch mask) and `masked_summary` (masked
mean/min/max for metrics). Deciding what the loss *is* belongs to `covey.algos.surrogates`.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor

from covey.algos.registry import BatchTotals, register_aggregation

__all__ = ["batch_totals", "masked_row_mean", "masked_summary"]

Positive = Annotated[float, Field(gt=0.0)]


def batch_totals(mask: Tensor, max_new_tokens: int) -> BatchTotals:
    """Counts of a whole batch from its loss mask [N, T] (sum these over ranks before use when distributed)."""
    if mask.dim() != 2:
        raise ValueError(f"batch_totals: mask must be [N, T]; got shape {tuple(mask.shape)}")
    if max_new_tokens <= 0:
        raise ValueError(f"batch_totals: max_new_tokens must be > 0; got {max_new_tokens}")
    num_tokens, num_seqs = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().to(mask.dtype)]).tolist()
    return BatchTotals(num_tokens=num_tokens, num_seqs=num_seqs, max_new_tokens=int(max_new_tokens))


def masked_row_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of each row of `x` [N, T] over its tokens where `mask` is 1: [N]; 0 for an empty row."""
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def masked_summary(
    x: Tensor, mask: Tensor, prefix: str, stats: tuple[str, ...] = ("mean", "min", "max")
) -> dict[str, float]:
    """{prefix_mean, prefix_min, prefix_max} of `x` where `mask` is 1 (same shape), in one device sync.

    Returns {} when the mask is empty: there is nothing to summarise, and a made-up value would
    pollute averaged logs.
    """
    x = x.detach().float()
    keep = mask > 0
    count = keep.sum()
    if count.item() == 0:
        return {}
    values = {
        "mean": (x * keep).sum() / count,
        "min": x.masked_fill(~keep, float("inf")).min(),
        "max": x.masked_fill(~keep, float("-inf")).max(),
    }
    out = torch.stack([values[s] for s in stats]).tolist()
    return {f"{prefix}_{s}": v for s, v in zip(stats, out)}


def _masked(loss_tok: Tensor, mask: Tensor) -> Tensor:
    if loss_tok.shape != mask.shape:
        raise ValueError(f"aggregation: loss_tok shape {tuple(loss_tok.shape)} must equal mask shape {tuple(mask.shape)}")
    return loss_tok * mask


@register_aggregation(
    "token-mean",
    paper="DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
    arxiv="2503.14476",
)
def token_mean(loss_tok: Tensor, mask: Tensor, totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
    """Mean over all unmasked tokens of the batch: sum_{i,t} l m / sum m  (verl default "token-mean", TRL "dapo").

    Every token weighs the same, so long sequences weigh more than short ones (DAPO §3.3).
    TRL "bnpo" is the same with the micro-batch's own count (not parallelism-invariant).
    """
    return _masked(loss_tok, mask).sum() / max(totals.num_tokens, 1.0), {}


@register_aggregation("token-sum")
def token_sum(loss_tok: Tensor, mask: Tensor, totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
    """Plain sum over unmasked tokens: sum_{i,t} l m (no normaliser; scales with batch size and length)."""
    return _masked(loss_tok, mask).sum(), {}


@register_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(loss_tok: Tensor, mask: Tensor, totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
    """Sum over tokens, mean over non-empty sequences: (1/#seq) sum_i sum_t l m  (verl "seq-mean-token-sum")."""
    return _masked(loss_tok, mask).sum() / max(totals.num_seqs, 1.0), {}


@register_aggregation(
    "seq-mean-token-mean",
    paper="DeepSeekMath: Pushing the Limits of Mathematical Reasoning",
    arxiv="2402.03300",
)
def seq_mean_token_mean(loss_tok: Tensor, mask: Tensor, totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
    """Mean over tokens of each sequence, then over sequences: (1/#seq) sum_i (1/L_i) sum_t l m.

    The original GRPO objective (1/G sum_i 1/|o_i| sum_t); TRL "grpo"/"sapo"; verl forces it for
    GSPO and SAPO. Empty rows (L_i = 0) add 0 and are not in #seq (TRL clamps L_i at 1; verl adds 1e-8).
    """
    lengths = mask.sum(-1).clamp(min=1.0)  # [N]
    return (_masked(loss_tok, mask).sum(-1) / lengths).sum() / max(totals.num_seqs, 1.0), {}


@register_aggregation(
    "seq-mean-token-sum-norm",
    paper="Understanding R1-Zero-Like Training: A Critical Perspective",
    arxiv="2503.20783",
)
def seq_mean_token_sum_norm(
    loss_tok: Tensor, mask: Tensor, totals: BatchTotals, *, normaliser: Positive | None = None
) -> tuple[Tensor, dict[str, float]]:
    """verl's Dr.GRPO-style constant normaliser: sum_{i,t} l m / S, S = normaliser or totals.max_new_tokens.

    Note: verl does NOT divide by the number of sequences, so the gradient grows with batch size
    (use "seq-mean-token-sum-constant" for the official Dr.GRPO form). verl's default S is the padded
    width of the micro-batch (mask.shape[-1]); covey uses the generation budget max_new_tokens
    instead so every micro-batch shares one S (parallelism invariance). `normaliser` = verl's
    `loss_scale_factor`.
    """
    scale = normaliser if normaliser is not None else float(totals.max_new_tokens)
    return _masked(loss_tok, mask).sum() / scale, {}


@register_aggregation(
    "seq-mean-token-sum-constant",
    paper="Understanding R1-Zero-Like Training: A Critical Perspective",
    arxiv="2503.20783",
)
def seq_mean_token_sum_constant(
    loss_tok: Tensor, mask: Tensor, totals: BatchTotals, *, normaliser: Positive | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Official Dr.GRPO (oat) / TRL "dr_grpo": mean over sequences of sum_t l m / C.

        loss = sum_{i,t} l m / (C * #seq),   C = normaliser or totals.max_new_tokens

    The length-unbiased objective of Dr.GRPO: every token weighs the same constant 1/(C #seq),
    independent of its sequence's length. Factors vs the others: "seq-mean-token-sum-norm" is this
    times #seq; oat uses C = generate_max_length (3000 in its scripts) and the micro-batch's row count;
    TRL uses B_local * max_completion_length (all rows, empty ones included). covey counts the
    non-empty rows of the whole batch.
    """
    scale = normaliser if normaliser is not None else float(totals.max_new_tokens)
    return _masked(loss_tok, mask).sum() / (scale * max(totals.num_seqs, 1.0)), {}
