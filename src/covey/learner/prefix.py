"""Shared-prompt teacher forcing: each distinct prompt runs through the model once per batch.

In group-relative RL the G completions of a group continue the same prompt. The plain learner
forward runs prompt + completion for every row, so a prompt of P tokens is computed (and
backpropagated) G times. Here the distinct prompts run once, with autograd, and their key/value
states are handed to the completions as `past_key_values`:

    prompts (distinct, batched by length)  --forward, use_cache-->  K, V per layer  [U, Hkv, P_u, D]
    K, V left-padded to P_max and gathered to the N rows            [N, Hkv, P_max, D]
    completions [N, T-1] with past_key_values = those rows,
        attention_mask = (prompt padding 0 | 1 ...), position_ids = plen + 0..T-2

Gradients reach the prompt's forward through the gathered K/V (an index_select: the G rows' key
gradients add up in the shared prompt), so log-probs and gradients equal the unshared forward's up
to float rounding (a test holds them within 1e-5 in fp32). The first completion token is predicted
from the prompt's last hidden state. Left padding of the gathered cache is masked (its keys are
zeros, never NaN). The same trick of sharing a prefix's KV cache across a group's samples is the
prefix-sharing of "Hydragen: High-Throughput LLM Inference with Shared Prefixes" (Juravsky et al.,
arXiv:2402.05099), applied here to the training forward and backward.

Not used with gradient checkpointing (a recomputed layer would append to the cache twice), and
refused for bidirectional models (`config.is_causal` False, the masked-diffusion family): there a
prompt's hidden states depend on the completion, so a shared prompt cache would be wrong.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["is_causal", "prompt_groups", "shared_prompt_hidden"]


def is_causal(model) -> bool:
    """False for a bidirectional model (`config.is_causal` False), True otherwise."""
    return getattr(getattr(model, "config", None), "is_causal", True) is not False


def prompt_groups(prompt_ids: list[Tensor]) -> tuple[list[Tensor], Tensor]:
    """The distinct prompts (in first-seen order) and, per row, the index [N] of its prompt."""
    index: dict[tuple[int, ...], int] = {}
    unique: list[Tensor] = []
    rows = []
    for p in prompt_ids:
        key = tuple(p.tolist())
        if key not in index:
            index[key] = len(unique)
            unique.append(p)
        rows.append(index[key])
    return unique, torch.tensor(rows, dtype=torch.long, device="cpu")


def _layers(cache) -> list[tuple[Tensor, Tensor]]:
    if hasattr(cache, "layers"):  # transformers >= 4.56 Cache objects
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(k, v) for k, v in cache]  # legacy tuple of (k, v)


def shared_prompt_hidden(decoder, prompt_ids: list[Tensor], completion_in: Tensor) -> tuple[Tensor, Tensor | None]:
    """Hidden states (after the final norm) of N rows = prompt_ids[i] + completion_in[i].

    decoder:        the HF base model (`model.get_decoder()`), called with input_ids only.
    prompt_ids:     N 1-D long tensors; equal ones are computed once.
    completion_in:  [N, Tc] long on the model's device (Tc may be 0): the completion tokens fed in.
    Returns h_last [N, H] (each row's last prompt position) and h_comp [N, Tc, H] (or None if Tc == 0).
    """
    from transformers import DynamicCache

    if not is_causal(decoder):
        raise ValueError("prompt sharing needs a causal model: in a bidirectional (masked-diffusion) model the "
                         "prompt's states depend on the completion")  # fmt: skip
    device = completion_in.device
    unique, row_of = prompt_groups(prompt_ids)
    lens = [len(p) for p in unique]
    p_max = max(lens)
    # Distinct prompts of equal length run together (no padding, no mask); `slot[u]` is where
    # prompt u lands in the concatenation of those batches.
    by_len: dict[int, list[int]] = {}
    for u, n in enumerate(lens):
        by_len.setdefault(n, []).append(u)
    slot = torch.empty(len(unique), dtype=torch.long, device="cpu")
    lasts, kvs, done = [], [], 0
    for n, us in by_len.items():
        ids = torch.stack([unique[u] for u in us]).to(device)
        out = decoder(input_ids=ids, use_cache=True)
        slot[us] = torch.arange(done, done + len(us), device="cpu")
        done += len(us)
        lasts.append(out.last_hidden_state[:, -1])
        kvs.append([(F.pad(k, (0, 0, p_max - n, 0)), F.pad(v, (0, 0, p_max - n, 0))) for k, v in _layers(out.past_key_values)])
    pick = slot[row_of].to(device)  # [N]: each row's prompt in the concatenation
    h_last = torch.cat(lasts).index_select(0, pick)
    t_c = completion_in.shape[1]
    if t_c == 0:
        return h_last, None
    n_layers = len(kvs[0])
    past = [
        (torch.cat([b[li][0] for b in kvs]).index_select(0, pick), torch.cat([b[li][1] for b in kvs]).index_select(0, pick))
        for li in range(n_layers)
    ]
    plen = torch.tensor([len(p) for p in prompt_ids], dtype=torch.long, device="cpu").to(device)  # [N]
    cols = torch.arange(p_max, device=device)
    attn = torch.cat([cols[None] >= (p_max - plen)[:, None], torch.ones(len(plen), t_c, dtype=torch.bool, device=device)], 1)
    pos = plen[:, None] + torch.arange(t_c, device=device)[None]
    out = decoder(
        input_ids=completion_in, attention_mask=attn.long(), position_ids=pos,
        past_key_values=DynamicCache(ddp_cache_data=past), use_cache=True,
    )  # fmt: skip
    return h_last, out.last_hidden_state
