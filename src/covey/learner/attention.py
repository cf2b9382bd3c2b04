"""The learner's attention kernel on CPU for short sequences: grouped-query attention in two matmuls.

HF's "sdpa" attention runs torch's CPU flash-attention kernel, whose backward is slow on the short
sequences of small-model RL (rows x heads of tiny blocks); HF's "eager" attention is faster there
but first copies every key/value head G times (`repeat_kv`) and sums the copies' gradients back.
`gqa_attention` does neither: the G query heads that share a key/value head are stacked as G x L
query rows, so scores and output are one matmul each against the shared keys and values:

    q [B, Hkv, G*L, D] @ k^T [B, Hkv, D, Lk] -> scores (+ mask, fp32 softmax) @ v -> [B, Hq, L, D]

It is registered with transformers' `AttentionInterface` as "covey_gqa" (with HF's eager mask:
additive, materialised), and `attention_kernel` switches a model to it for one forward when the
forward is on CPU, the model uses "sdpa", its type is in `forward.SUPPORTED` without sliding
windows, activation checkpointing is off (its recompute in the backward would see "sdpa" again),
and the per-layer score matrix (rows x query heads x queries x keys) has at most `MAX_SCORES`
elements. The backward does not look at the setting, so it is restored as soon as
the forward returns.

Measured forward + backward of `completion_logprobs` (bf16 autocast, 1 thread, 2-core AMD EPYC,
`benchmarks/ab_learner.py attention`): at the step-vs-trl shapes (8 prompts x 8 x 24 tokens,
shared prompts) 1.54x sdpa on tiny-llama (eager: 1.43x) and 1.13x on SmolLM2-135M (eager: 1.01x);
on tiny-llama break-even near 20M score elements per layer and 0.6x at 45M, hence the 4M limit.
Same function as sdpa: log-probs and gradients within 1e-5 in fp32 (tests/learner/test_learner_shared.py).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from covey.engine.forward import SUPPORTED, uses_sliding_window

__all__ = ["MAX_SCORES", "attention_kernel", "gqa_attention"]

NAME = "covey_gqa"
MAX_SCORES = 4_000_000  # per-layer score elements up to which CPU forwards use gqa_attention (0: never)


def gqa_attention(
    module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None, scaling: float | None = None,
    dropout: float = 0.0, **kwargs,
) -> tuple[Tensor, None]:
    """HF attention-function signature: query [B, Hq, L, D], key/value [B, Hkv, Lk, D], attention_mask
    additive [B, 1, L, >=Lk] or None: then causal (queries at the last L positions), unless the model
    is bidirectional (`config.is_causal` False: a masked-diffusion model, docs/diffusion.md) or the
    caller passes `is_causal=False`; then every query sees every key.
    Returns the output [B, L, Hq, D] and no attention weights."""
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"{NAME} attention does not support {name}")
    b, hq, length, d = query.shape
    hkv, lk = key.shape[1], key.shape[2]
    g = hq // hkv
    scale = d**-0.5 if scaling is None else scaling
    scores = torch.matmul(query.reshape(b, hkv, g * length, d), key.transpose(2, 3)) * scale  # [B, Hkv, G*L, Lk]
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(getattr(module, "config", None), "is_causal", True) is not False
    if attention_mask is None and length > 1 and causal:
        future = torch.ones(length, lk, dtype=torch.bool, device=query.device).triu(lk - length + 1)
        attention_mask = torch.zeros(length, lk, dtype=scores.dtype, device=query.device).masked_fill(future, float("-inf"))[None, None]
    if attention_mask is not None:
        mask = attention_mask[..., :lk].unsqueeze(2)  # [B, 1, 1, L, Lk]: the same for the G heads of a group
        scores = (scores.view(b, hkv, g, length, lk) + mask).view(b, hkv, g * length, lk)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout and module.training:
        probs = F.dropout(probs, p=dropout, training=True)
    out = torch.matmul(probs, value).view(b, hq, length, d)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(NAME, gqa_attention)
    AttentionMaskInterface.register(NAME, eager_mask)


_register()


@contextmanager
def attention_kernel(model, device: torch.device, scores: int, checkpointing: bool):
    """Run the block's forward with `gqa_attention` when that is the faster CPU kernel (module docstring).
    checkpointing: whether any module of `model` has activation checkpointing on (the caller knows)."""
    config = getattr(model, "config", None)
    use = (
        device.type == "cpu"
        and 0 < scores <= MAX_SCORES
        and getattr(config, "_attn_implementation", None) == "sdpa"
        and getattr(config, "model_type", None) in SUPPORTED
        and not uses_sliding_window(config)
        and hasattr(model, "set_attn_implementation")
        # activation checkpointing re-runs the forward in the backward, after the setting is restored:
        # a different kernel there would not match the saved graph
        and not checkpointing
    )
    if not use:
        yield
        return
    model.set_attn_implementation(NAME)
    try:
        yield
    finally:
        model.set_attn_implementation("sdpa")
