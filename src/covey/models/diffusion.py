"""Facts about masked-diffusion language models (the `masked_diffusion` family, docs/diffusion.md).

A masked-diffusion model is any HF module whose ``forward(input_ids, attention_mask=None)`` returns
logits [B, L, V] predicting, at every masked position, the token hidden there. Two conventions:
LLaDA predicts position i from the logits at i (`logit_shift` 0); Dream, adapted from an
autoregressive Qwen2, predicts it from the logits at i - 1 (`logit_shift` 1).

Read from the model and tokenizer, never guessed from a config key: the mask id is
`tokenizer.mask_token_id`, else `config.mask_token_id`, else LLaDA's 126336 for model_type
"llada"; the pad id must differ from it (LLaDA's generate.py asserts the same).
"""

from __future__ import annotations

__all__ = ["BIDIRECTIONAL_TYPES", "family_of_config", "logit_shift", "mask_token_id"]

BIDIRECTIONAL_TYPES = {"llada": 0, "Dream": 1}
"""config.json model_type of released masked-diffusion models (remote code) -> their logit shift."""
LLADA_MASK_ID = 126336


def family_of_config(config: dict | None) -> str | None:
    """"masked_diffusion" or "causal" from a config.json dict (None when it cannot be told)."""
    if config is None:
        return None
    if config.get("is_causal") is False or config.get("model_type") in BIDIRECTIONAL_TYPES:
        return "masked_diffusion"
    return "causal"


def mask_token_id(model, tokenizer) -> int:
    """The mask token id (module docstring); ValueError when none is known or it equals the pad id."""
    config = getattr(model, "config", None)
    mid = getattr(tokenizer, "mask_token_id", None)
    if mid is None:
        mid = getattr(config, "mask_token_id", None)
    if mid is None and getattr(config, "model_type", None) == "llada":
        mid = LLADA_MASK_ID
    if mid is None:
        raise ValueError("masked diffusion: the model has no mask token (tokenizer.mask_token_id and "
                         "config.mask_token_id are unset)")  # fmt: skip
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is not None and int(pad) == int(mid):
        raise ValueError(f"masked diffusion: the pad id equals the mask id ({mid}); give the tokenizer another pad token")
    return int(mid)


def logit_shift(model) -> int:
    """0 (LLaDA: position i's logits predict token i) or 1 (Dream: position i - 1's logits)."""
    config = getattr(model, "config", None)
    shift = getattr(config, "logit_shift", None)
    if shift is None:
        shift = BIDIRECTIONAL_TYPES.get(getattr(config, "model_type", None), 0)
    return int(shift)
