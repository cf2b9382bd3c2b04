"""SFT losses (registry `SFT_LOSSES`, `covey sft --loss NAME --loss-param key=value`): what `covey sft`
minimises on teacher-forced demonstrations.

A loss is ``fn(logits [B, L, V], labels [B, L], generator, **params) -> (loss_tok [B, L], metrics)``
over positions already shifted (logits at t predict labels at t); labels are -100 where nothing is
learned (prompt, padding), and `covey sft` averages `loss_tok` over the other positions.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from covey.registry import Registry

__all__ = ["SFT_LOSSES", "otr_token_loss"]


def _check(out, args) -> str | None:
    ok = isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor) and out[0].shape == args[1].shape
    return None if ok else "must return (loss_tok [B, L] like labels, metrics dict)"


SFT_LOSSES = Registry("SFT loss", context=("logits", "labels", "generator"),
                      signature="fn(logits [B, L, V], labels [B, L], generator, **params) -> (loss_tok [B, L], metrics)",
                      returns=_check, returns_doc="(loss_tok [B, L], metrics)", defaults_required=True)  # fmt: skip


@SFT_LOSSES.register("ce")
def ce(logits: Tensor, labels: Tensor, generator: torch.Generator) -> tuple[Tensor, dict[str, float]]:
    """Cross-entropy on the demonstration's tokens (the default; plain SFT)."""
    flat = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="none")
    return flat.view_as(labels), {}


def otr_token_loss(logp: Tensor, labels: Tensor, samples: Tensor, beta_neg: float) -> Tensor:
    """OTR's per-position loss from given samples: logp [..., V] log-softmax at temperature 1, labels
    [...], samples [..., K] token ids. r_k = 1 when a_k is the label, else -beta_neg;
    loss = -(1/K) sum_k r_k log pi(a_k)."""
    r = torch.where(samples == labels.clamp_min(0)[..., None], 1.0, -beta_neg)
    return -(r * logp.gather(-1, samples)).mean(-1)


@SFT_LOSSES.register("otr", paper="One-Token Rollout: Guiding Supervised Fine-Tuning of LLMs with Policy Gradient", arxiv="2509.26313")
def otr(logits: Tensor, labels: Tensor, generator: torch.Generator, *, k: Annotated[int, Field(ge=1)] = 8,
        tau: Annotated[float, Field(gt=0)] = 1.0, beta_neg: Annotated[float, Field(ge=0)] = 0.1) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    """OTR: per position, K tokens sampled from the policy; the target is rewarded, the rest penalised.

    At each labelled position t, a_1..a_K ~ softmax(z_t / tau) (no gradient through the draw, from the
    step's seeded generator); r_k = 1 if a_k = y_t else -beta_neg; loss_t = -(1/K) sum_k r_k
    log softmax(z_t)[a_k] (temperature 1, with gradient). RECONSTRUCTED: no code was released and the
    paper's equations could not be read; the structure is the abstract's ("samples multiple candidate
    tokens from the current policy", "a temperature", a penalty on sampled incorrect tokens) and K = 8,
    tau = 1.0, beta_neg = 0.1 are covey's choices. When no sample equals the target a position has
    only negative terms; whether the paper always adds the target to the candidates is unknown.
    Metric `sft/otr_hit_frac`: labelled positions where some sample equals the target."""
    z = logits.float()
    with torch.no_grad():
        probs = torch.softmax(z / tau, -1).flatten(0, -2)
        samples = torch.multinomial(probs, k, replacement=True, generator=generator).view(*labels.shape, k)
    loss = otr_token_loss(torch.log_softmax(z, -1), labels, samples, beta_neg)
    keep = labels != -100
    hit = (samples == labels.clamp_min(0)[..., None]).any(-1) & keep
    return loss * keep, {"sft/otr_hit_frac": float(hit.sum()) / max(int(keep.sum()), 1)}
