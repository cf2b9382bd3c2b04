"""Soft-thinking generation and the Gumbel log-density of a soft token (SofT-GRPO, arXiv 2511.06411).

Checked against the released code: zz1358m/SofT-GRPO-master @ 2b9d8ec6d8f022f2aefe7a1c2512dcb9924cddfe
(`Soft-Thinking+noise+loss-main/sglang_soft_thinking_pkg/python/sglang/srt/layers/sampler.py`, the
`add_noise_gumbel_softmax` branch; `verl-0.4.x/verl/utils/torch_functional.py::logprobs_from_logits_topk_gumbel`;
`verl-0.4.x/verl/workers/actor/dp_actor.py::_forward_micro_batch`; `SofT-GRPO-deepscaler-8k.sh`).

In the thinking span each position is a *soft token*, a mixture of the top-k token embeddings:

    p       = softmax(filter(logits / T))                      (top-k, top-p, min-p renormalised)
    p~_k    = the k largest of p, renormalised; l_k = log(p~_k + 1e-6)
    G_k     ~ Gumbel(0, 1), clamped to [-1.5, 3]
    g_k     = l_k + noise_factor G_k                          (the stored scores)
    w       = softmax(g / tau_g); candidates sorted by w, largest first (ids and g with them)
    input   = sum_k w_k E[id_k]                                (the next position's input vector)
    token   = id_1 (the id written for the row)
    log-prob (behaviour) = mean over {k : l_k > -3} of (-G_k - exp(-G_k))       (the noise's log-density)

After the thinking span (the top-1 candidate was `think_end_id`, or `soft_tokens` soft positions were
written) tokens are sampled as usual from p, stored as ids [token, 0, ..., 0] with scores 0, and their
log-prob is the tempered full-distribution one. The learner scores a soft position with
`soft_token_logprob`: with p^ the current policy's softmax(logits / T) over the stored ids, renormalised,
z = clamp(g - log(p^ + 1e-6), -1.5, 3) and log-prob = mean over {log(p^+1e-6) > -3} of (-z - exp(-z)) (at the
sampling weights z = G, the behaviour log-prob).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from covey.engine.base import Generation, SamplingParams, version_tensor
from covey.engine.forward import decode_step, new_cache, prefill
from covey.engine.sampling import filter_logits

__all__ = ["SoftParams", "gumbel_log_density", "soft_generate", "soft_token_logprob", "soft_weights"]

LOG_FLOOR = -3.0  # candidates with log p~ at or below this do not count in a soft token's log-density


@dataclass(frozen=True)
class SoftParams:
    """top_k: candidates per soft token (the released script's top_k 5); gumbel_temperature: tau_g (0.1);
    noise_factor: the Gumbel noise's scale (1); think_end_id: the token that ends the thinking span (None:
    none); soft_tokens: at most this many soft positions per row (0: all of max_new_tokens)."""

    top_k: int = 5
    gumbel_temperature: float = 0.1
    noise_factor: float = 1.0
    think_end_id: int | None = None
    soft_tokens: int = 0


def gumbel_log_density(z: Tensor) -> Tensor:
    """log of the Gumbel(0, 1) density at z: -z - exp(-z)."""
    return -z - torch.exp(-z)


def soft_weights(scores: Tensor, tau: float) -> Tensor:
    """The mixture weights softmax(g / tau_g) of scores [..., k]."""
    return torch.softmax(scores / tau, dim=-1)


def soft_token_logprob(logits: Tensor, ids: Tensor, scores: Tensor) -> Tensor:
    """[...] log-density of soft tokens under `logits` [..., V] (already divided by the temperature), with
    stored candidate ids and scores [..., k] (module docstring; `logprobs_from_logits_topk_gumbel`)."""
    probs = torch.softmax(logits.float(), dim=-1).gather(-1, ids)
    logp = torch.log(probs / probs.sum(-1, keepdim=True) + 1e-6)
    z = (scores - logp).clamp(-1.5, 3.0)
    keep = (logp > LOG_FLOOR).float()
    return (gumbel_log_density(z) * keep).sum(-1) / keep.sum(-1).clamp(min=1.0)


def _gumbel(shape, generator: torch.Generator, device) -> Tensor:
    u = torch.rand(shape, generator=generator, dtype=torch.float32).clamp(1e-10, 1.0 - 1e-7)
    return (-torch.log(-torch.log(u))).clamp(-1.5, 3.0).to(device)


@torch.no_grad()  # not inference_mode: the learner saves these ids and scores for backward
def soft_generate(engine, prompts: list[list[int]], n: int, sampling: SamplingParams, soft: SoftParams | None,
                  lead: Tensor | None = None):  # fmt: skip
    """`n` soft-thinking completions per prompt with the torch engine's weights: (Generation, per row [L, k]
    long candidate ids, per row [L, k] float32 scores). One decode loop over all rows (no waves).
    `soft` None: every position is an ordinary sampled token (k = 1). `lead` [P * n, H]: an input vector per
    row placed after its prompt, before the first completion token (a latent action: `ctrls_latent`); it is
    context, not a completion token."""
    w, dev, sp = engine.weights, engine.device, sampling
    plist = [list(map(int, p)) for p in prompts]
    if not plist or n < 1:
        raise ValueError("soft_generate: give at least one prompt and n >= 1")
    if max(len(p) for p in plist) + sp.max_new_tokens > engine.max_positions:
        raise ValueError(f"soft_generate: a prompt + max_new_tokens exceeds max_positions={engine.max_positions}")
    k = soft.top_k if soft is not None else 1
    off = 0 if lead is None else 1  # the lead vector's cache column
    u_, p_max, new = len(plist), max(len(p) for p in plist), sp.max_new_tokens
    rows = u_ * n
    if lead is not None and tuple(lead.shape) != (rows, w.embed.shape[1]):
        raise ValueError(f"soft_generate: lead must be [{rows}, {w.embed.shape[1]}], got {tuple(lead.shape)}")
    ids = torch.full((u_, p_max), engine.pad_token_id, dtype=torch.long)
    valid_p = torch.zeros(u_, p_max, dtype=torch.bool)
    for i, p in enumerate(plist):
        ids[i, p_max - len(p) :], valid_p[i, p_max - len(p) :] = torch.tensor(p), True
    kv = new_cache(w, rows, p_max + off + new, engine.dtype)
    logits = prefill(w, ids.to(dev), valid_p.to(dev), kv.rows(0, u_))
    if n > 1:
        kv.gather_rows(torch.arange(u_, device=dev).repeat_interleave(n), p_max)
        logits = logits.repeat_interleave(n, dim=0)
    valid = torch.ones(rows, p_max + off + new, dtype=torch.bool, device=dev)
    valid[:, :p_max] = valid_p.to(dev).repeat_interleave(n, dim=0)
    plen = torch.tensor([len(p) for p in plist], device=dev).repeat_interleave(n)
    if lead is not None:
        logits = decode_step(w, torch.zeros(rows, dtype=torch.long, device=dev), plen, kv, p_max, valid, embeds=lead.to(dev))
        plen = plen + 1
    stop = set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(engine.eos_ids))
    gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else 0)
    out_tok = torch.full((rows, new), engine.pad_token_id, dtype=torch.long)
    out_lp, out_ids, out_sc = torch.zeros(rows, new), torch.zeros(rows, new, k, dtype=torch.long), torch.zeros(rows, new, k)
    lengths = torch.full((rows,), new, dtype=torch.long)
    alive = torch.ones(rows, dtype=torch.bool)
    soft_on = torch.ones(rows, dtype=torch.bool)
    budget = (soft.soft_tokens or new) if soft is not None else 0
    stopped = torch.zeros(rows, dtype=torch.bool)
    for step in range(new):
        if step > 0:
            logits = decode_step(w, tok.to(dev), (plen + step - 1).to(dev), kv, p_max + off + step - 1, valid, embeds=embeds.to(dev))
        scaled = logits.float().cpu() / sp.temperature
        probs = torch.softmax(filter_logits(scaled, top_k=sp.top_k, top_p=sp.top_p, min_p=sp.min_p), -1)
        top_p_, top_i = probs.topk(k, dim=-1)
        top_p_ = top_p_ / top_p_.sum(-1, keepdim=True)
        logl = torch.log(top_p_ + 1e-6)
        g_noise = _gumbel((rows, k), gen, "cpu")
        scores = logl + (soft.noise_factor if soft is not None else 1.0) * g_noise
        wts = soft_weights(scores, soft.gumbel_temperature if soft is not None else 1.0)
        order = torch.argsort(wts, dim=-1, descending=True)
        wts, top_i, scores = wts.gather(-1, order), top_i.gather(-1, order), scores.gather(-1, order)
        g_sorted, l_sorted = g_noise.gather(-1, order), logl.gather(-1, order)
        keep = (l_sorted > LOG_FLOOR).float()
        soft_lp = (gumbel_log_density(g_sorted) * keep).sum(-1) / keep.sum(-1).clamp(min=1.0)
        hard_tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
        hard_lp = torch.log_softmax(scaled, -1).gather(-1, hard_tok[:, None]).squeeze(-1)
        is_soft = soft_on & (step < budget)
        tok = torch.where(is_soft, top_i[:, 0], hard_tok)
        cand = torch.where(is_soft[:, None], top_i, F.pad(hard_tok[:, None], (0, k - 1)))
        sc = torch.where(is_soft[:, None], scores, torch.zeros_like(scores))
        mix = torch.where(is_soft[:, None], wts, F.pad(torch.ones(rows, 1), (0, k - 1)))
        embeds = (mix[..., None] * w.embed.float().cpu()[cand]).sum(1)  # [R, H]: sum_k w_k E[id_k]
        live = alive.clone()
        out_tok[live, step] = tok[live]
        out_lp[live, step] = torch.where(is_soft, soft_lp, hard_lp)[live]
        out_ids[live, step], out_sc[live, step] = cand[live], sc[live]
        if soft is not None and soft.think_end_id is not None:
            soft_on &= ~(is_soft & (tok == soft.think_end_id))
        done = live & torch.tensor([int(t) in stop for t in tok.tolist()])
        lengths = torch.where(done, step + 1, lengths)
        stopped |= done
        alive &= ~done
        if not bool(alive.any()):
            break
    mask = (torch.arange(new)[None, :] < lengths[:, None]).float()
    gen_out = Generation(
        prompt_ids=[torch.tensor(plist[i // n], dtype=torch.long) for i in range(rows)], completion_ids=out_tok * mask.long()
        + engine.pad_token_id * (1 - mask.long()), completion_mask=mask, logprobs=out_lp * mask,
        finish_reason=["stop" if s else "length" for s in stopped.tolist()],
        prompt_index=torch.arange(u_).repeat_interleave(n), policy_version=version_tensor(mask, engine.version),
    )  # fmt: skip
    ls = lengths.tolist()
    return gen_out, [out_ids[i, : ls[i]].clone() for i in range(rows)], [out_sc[i, : ls[i]].clone() for i in range(rows)]

