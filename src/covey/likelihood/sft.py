"""The LLaDA SFT loss, `covey sft`'s masked-diffusion mode (a warm start before RL, docs/diffusion.md).

Checked against ML-GSAI/LLaDA `GUIDELINES.md` (commit b7e6c3565f19):

    t ~ U(0, 1) per sequence;  p = (1 - eps) t + eps, eps = 1e-3
    each answer token masked independently with probability p (prompt tokens never)
    answers padded with EOS to a common length: the EOS padding is part of the answer (a target)
    loss = sum_rows sum_masked CE / p / answer_length_row  /  B
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["encode_sft", "llada_sft_loss"]

EPS = 1e-3


def encode_sft(tok, batch: list[dict], demo, apply_chat) -> tuple[Tensor, Tensor]:
    """[B, W] ids (prompt + answer + EOS, right-padded with EOS to the widest row) and the answer
    mask [B, W] (True on the answer, its EOS and the EOS padding)."""
    eos = tok.eos_token_id
    seqs, starts = [], []
    for item in batch:
        p = apply_chat(tok, item["prompt"])
        seqs.append(p + tok.encode(demo(item), add_special_tokens=False) + [eos])
        starts.append(len(p))
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [eos] * (width - len(s)) for s in seqs])
    answer = torch.arange(width)[None] >= torch.tensor(starts)[:, None]
    return ids, answer


def llada_sft_loss(model, ids: Tensor, answer: Tensor, mask_id: int, generator: torch.Generator | None = None) -> Tensor:
    """The module docstring's loss for one batch (scalar, with autograd)."""
    b, w = ids.shape
    t = torch.rand(b, generator=generator, device="cpu").to(ids.device)
    p = (1 - EPS) * t + EPS
    masked = (torch.rand(b, w, generator=generator, device="cpu").to(ids.device) < p[:, None]) & answer
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    logits = model(input_ids=noisy).logits
    rows = masked.nonzero(as_tuple=True)[0]
    ce = F.cross_entropy(logits[masked].float(), ids[masked], reduction="none")
    lengths = answer.sum(-1).float()
    return (ce / p[rows] / lengths[rows]).sum() / b
