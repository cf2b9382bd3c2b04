"""What an estimator sees: a `Canvas` of N rows of L completion tokens, a way to score masked copies
of it, and one seeded random stream per (row, purpose).

    canvas.score(comp_mask [N, L] bool, prompt_mask list of [P_i] bool | None) -> logp [N, L] fp32
        log pi(y_i | y with the masked positions replaced by the mask token, q) at every position,
        with autograd (a model forward; tests pass a closed-form scorer instead)
    canvas.rng(i, *key) -> torch.Generator seeded from (row seed i, key)
    canvas.sample: None (the full estimate) or j (only Monte Carlo sample j: BGPO's per-sample terms)

`row_seeds` gives each row its seed from its content and the policy version of its tokens, so the
old, reference and current models draw the same masks for it (common random numbers), whatever
micro-batch or order the row is in, and a resumed run draws the same masks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from covey.dtypes import model_device
from covey.models.diffusion import logit_shift, mask_token_id

__all__ = ["Canvas", "estimate", "mc_samples", "model_canvas", "row_seeds"]


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


@dataclass
class Canvas:
    score: Callable[[Tensor, list[Tensor] | None], Tensor]
    n: int
    length: int
    seeds: list[int]
    prompt_lengths: list[int]
    sample: int | None = None

    def rng(self, i: int, *key) -> torch.Generator:
        return torch.Generator().manual_seed(_seed(self.seeds[i], *key))


def row_seeds(prompt_ids: list[Tensor], completion_ids: Tensor, policy_version: Tensor | None) -> list[int]:
    """One seed per row from its tokens and the newest policy version among them (module docstring)."""
    out = []
    for i, p in enumerate(prompt_ids):
        v = int(policy_version[i].max()) if policy_version is not None and policy_version.numel() else 0
        h = hashlib.sha256(p.cpu().numpy().tobytes() + b"|" + completion_ids[i].cpu().numpy().tobytes() + f"|{v}".encode())
        out.append(int.from_bytes(h.digest()[:8], "little") >> 1)
    return out


def model_canvas(model, tokenizer_or_mask_id, prompt_ids: list[Tensor], completion_ids: Tensor, seeds: list[int],
                 sample: int | None = None) -> Canvas:  # fmt: skip
    """A canvas whose `score` runs `model` on [prompt | masked completion] (rows of equal prompt
    length together, no padding; logits aligned for Dream's shift), on the model's device."""
    mid = tokenizer_or_mask_id if isinstance(tokenizer_or_mask_id, int) else mask_token_id(model, tokenizer_or_mask_id)
    shift = logit_shift(model)
    device = model_device(model)
    comp = completion_ids.to(device)
    n, length = comp.shape
    plens = [len(p) for p in prompt_ids]
    groups: dict[int, list[int]] = {}
    for i, pl in enumerate(plens):
        groups.setdefault(pl, []).append(i)

    def score(comp_mask: Tensor, prompt_mask: list[Tensor] | None = None) -> Tensor:
        out = torch.zeros(n, length, dtype=torch.float32, device=device)
        cm = comp_mask.to(device)
        for pl, idx in groups.items():
            rows = torch.tensor(idx, device=device)
            prompt = torch.stack([prompt_ids[i].to(device) for i in idx])
            if prompt_mask is not None:
                pm = torch.stack([prompt_mask[i].to(device) for i in idx])
                prompt = torch.where(pm, torch.full_like(prompt, mid), prompt)
            target = comp[rows]
            noisy = torch.cat([prompt, torch.where(cm[rows], torch.full_like(target, mid), target)], 1)
            logits = model(input_ids=noisy).logits
            if shift:
                logits = logits[:, pl - 1 : pl - 1 + length]
            else:
                logits = logits[:, pl:]
            lp = F.log_softmax(logits.float(), -1).gather(-1, target[..., None]).squeeze(-1)
            out = out.index_put((rows,), lp)
        return out

    return Canvas(score=score, n=n, length=length, seeds=seeds, prompt_lengths=plens, sample=sample)


def mc_samples(entry_name: str, params: dict) -> int:
    """How many Monte Carlo samples (separate forwards for BGPO's per-sample backward) an estimator draws."""
    from covey.likelihood.registry import LIKELIHOODS

    entry = LIKELIHOODS.get(entry_name)
    fn = entry.caps.mc_samples
    return int(fn({**entry.defaults, **params})) if fn is not None else 1


def estimate(bound, model, tokenizer, batch, sample: int | None = None) -> Tensor:
    """token_logp [N, T] of `batch`'s completions under `model` with the bound estimator `bound`."""
    seeds = row_seeds(batch.prompt_ids, batch.completion_ids, batch.policy_version)
    canvas = model_canvas(model, tokenizer, batch.prompt_ids, batch.completion_ids, seeds, sample)
    return bound(canvas).token_logp
