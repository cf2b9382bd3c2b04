"""Learner-side log-probs of completion tokens (teacher forcing), with autograd.

The one home for "log pi_theta(token | prefix)" on the learner: the same quantity the engine
reports as behaviour log-probs, `log softmax(logits / temperature)` of the full vocabulary (see
`covey.engine.sampling`), so at equal weights and temperature the two agree (a test keeps them
within 1e-4 in fp32).

Forward: when rows share a prompt (a group's G completions), each distinct prompt runs once and
its KV cache feeds the completions (`covey.learner.prefix`; `share_prompts`). Otherwise the base model
runs once on each row's prompt + completion (right-padded, so positions are 0..len-1 with no
attention mask: padding only ever follows the real tokens under the causal mask).

Devices: the inputs may be on any device; the computation and the results are on the model's.

Memory: Only positions with completion_mask == 1 go through lm_head, `chunk_size` tokens at a time,
and no [chunk, V] logits outlive their chunk: the backward recomputes them. Works under bf16
autocast (logits are upcast to fp32 before the softmax).

The head (lm_head + log-softmax + pick the target) is one autograd function, `HeadLogprob`, when the
head is a plain `nn.Linear` and no entropy is wanted: its forward keeps only the log-normaliser per
token, and its backward recomputes the chunk's logits once and turns them into the gradient in
place (softmax, minus the one-hot target, times the incoming gradient): about half the passes over
[chunk, V] of autograd through `logsumexp` + `gather` under checkpointing, which still serves entropies
and other heads. On SmolLM2's 49k vocabulary those passes were ~17% of a CPU learner update.

Vision-language policies (docs/vlm.md): with `vision` (each row's `covey.models.vision.VisionInputs`) the
forward is the VLM's base model over the same right-padded ids with the rows' image tensors, M-RoPE
positions and token types (`covey.models.vision.vision_hidden`, the function the engine's prefill uses),
without prompt sharing: the vision tower runs once per row.

Attention kernel: short sequences on CPU run `covey.learner.attention.gqa_attention` instead of the
model's "sdpa" (torch's CPU flash-attention backward is slow there); same function, see that module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from covey.learner.attention import attention_kernel
from covey.dtypes import model_device
from covey.learner.prefix import is_causal, prompt_groups, shared_prompt_hidden

__all__ = ["STATS", "HeadLogprob", "completion_logprobs", "completion_logprobs_stats", "token_logprobs_from_logits",
           "token_stats_from_logits"]

STATS = ("sum_p2", "vocab_mean_logp")
"""Per-token statistics of the tempered next-token distribution pi = softmax(z / T) that the head can
return besides the sampled token's log-prob (no gradient; `token_stats_from_logits`):

    sum_p2           sum_v pi_v^2                          (OBLR-PO / verl OTB gradient-norm proxy)
    vocab_mean_logp  mean_v log pi_v = mean_v z_v - lse(z)  (ROVER's uniform-policy value of a state)
"""


def token_stats_from_logits(z: Tensor, lse: Tensor, names: tuple[str, ...]) -> list[Tensor]:
    """The statistics `names` (see `STATS`) [M] fp32 of tempered fp32 logits z [M, V] with lse = logsumexp(z)."""
    out = []
    for name in names:
        if name == "sum_p2":
            out.append((z - lse[:, None]).mul_(2.0).exp_().sum(-1))
        elif name == "vocab_mean_logp":
            out.append(z.mean(-1) - lse)
        else:
            raise ValueError(f"unknown token statistic {name!r}; known: {', '.join(STATS)}")
    return out


def token_logprobs_from_logits(
    logits: Tensor, targets: Tensor, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """logits [M, V], targets [M] -> (log softmax(logits / temperature)[target] [M] fp32, entropy [M] or None)."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    lse = torch.logsumexp(z, dim=-1)  # [M]
    logp = z.gather(-1, targets[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return logp, None
    # H = -sum p log p = lse - sum p z
    entropy = lse - (z.softmax(-1) * z).sum(-1)
    return logp, entropy


class HeadLogprob(torch.autograd.Function):
    """logp[m] = log softmax((h @ W^T + b) / T)[targets[m]] for h [M, H]; returns fp32 [M].

    Matmuls run in `dtype` (the autocast dtype, or the weights'), the softmax in fp32, as autograd
    through `token_logprobs_from_logits(lm_head(h))` would; only h and the log-normaliser are saved.
    """

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, temperature: float, dtype: torch.dtype,
                stats: tuple[str, ...] = ()):  # fmt: skip
        with torch.autocast(h.device.type, enabled=False):
            z = _head_logits(h, weight, bias, dtype, temperature)
            lse = torch.logsumexp(z, dim=-1)
            logp = z.gather(-1, targets[:, None]).squeeze(-1) - lse
            extra = token_stats_from_logits(z, lse, stats)  # from the same [M, V] pass, no gradient
        ctx.save_for_backward(h, weight, bias, targets, lse)
        ctx.temperature, ctx.dtype = temperature, dtype
        if not stats:
            return logp
        ctx.mark_non_differentiable(*extra)
        return (logp, *extra)

    @staticmethod
    def backward(ctx, grad: Tensor, *_stat_grads):
        h, weight, bias, targets, lse = ctx.saved_tensors
        t, dtype = ctx.temperature, ctx.dtype
        with torch.autocast(h.device.type, enabled=False):
            # d logp / d z = onehot(target) - softmax(z); z = logits / T
            g = _head_logits(h, weight, bias, dtype, t).sub_(lse[:, None]).exp_().mul_(-grad[:, None])
            g[torch.arange(len(targets), device=g.device), targets] += grad
            if t != 1.0:
                g.div_(t)
            g = g.to(dtype)  # [M, V]: gradient of the logits
            grad_h = (g @ weight.to(dtype)).to(h.dtype) if ctx.needs_input_grad[0] else None
            grad_w = (g.t() @ h.to(dtype)).to(weight.dtype) if ctx.needs_input_grad[1] else None
            grad_b = g.sum(0).to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b, None, None, None, None


def _head_logits(h: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype, temperature: float) -> Tensor:
    z = F.linear(h.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)).float()
    return z.div_(temperature) if temperature != 1.0 else z


def completion_logprobs(
    model,
    prompt_ids: list[Tensor],
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_size: int = 512,
    share_prompts: bool | str = "auto",
    vision: list | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs (and entropies) of the completions under `model` at `temperature`:
    `completion_logprobs_stats` without statistics."""
    logp, entropy, _ = completion_logprobs_stats(
        model, prompt_ids, completion_ids, completion_mask, temperature=temperature, with_entropy=with_entropy,
        chunk_size=chunk_size, share_prompts=share_prompts, vision=vision,
    )  # fmt: skip
    return logp, entropy


def completion_logprobs_stats(
    model,
    prompt_ids: list[Tensor],
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    stats: tuple[str, ...] = (),
    chunk_size: int = 512,
    share_prompts: bool | str = "auto",
    vision: list | None = None,
) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
    """Per-token log-probs of the completions under `model` at `temperature`, and statistics.

    model:           an HF causal LM (also a PEFT-wrapped one): `get_decoder()` gives hidden
                     states (after the final norm), `get_output_embeddings()` the lm_head.
    prompt_ids:      N 1-D long tensors (lengths may differ; each non-empty).
    completion_ids:  [N, T] long, right-padded.
    completion_mask: [N, T], nonzero where a log-prob is wanted (real completion tokens).
    share_prompts:   run each distinct prompt once and reuse its KV cache (True), never (False), or
                     "auto": when some prompt repeats, gradient checkpointing is off, no layer
                     uses sliding-window attention and the model is causal.
    stats:           names from `STATS` (sum_p2, vocab_mean_logp), computed from the same chunked
                     logits (never [N, T, V]), without gradient.
    vision:          N `VisionInputs` or None (a vision-language model: the image inputs of each row's
                     prompt; module docstring), or None for a text-only batch.
    Returns logp [N, T] float32 (0 where the mask is 0), entropy [N, T] float32 of the same
    tempered distribution (or None), and {name: [N, T] float32} for `stats` ({} when none), on the
    model's device. logp and entropy carry autograd to the model's parameters when grad is on.
    """
    n, t = completion_ids.shape
    if len(prompt_ids) != n:
        raise ValueError(f"prompt_ids must hold N={n} tensors (one per completion row), got {len(prompt_ids)}")
    if tuple(completion_mask.shape) != (n, t):
        raise ValueError(f"completion_mask must have shape {(n, t)}, got {tuple(completion_mask.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    unknown = [x for x in stats if x not in STATS]
    if unknown:
        raise ValueError(f"unknown token statistic(s) {unknown}; known: {', '.join(STATS)}")
    stats = tuple(dict.fromkeys(stats))
    if share_prompts not in (True, False, "auto"):
        raise ValueError(f"share_prompts must be True, False or 'auto', got {share_prompts!r}")
    device = model_device(model)
    completion_ids, keep = completion_ids.to(device), completion_mask.to(device) != 0
    plen_cpu = torch.tensor([len(p) for p in prompt_ids], dtype=torch.long, device="cpu")
    if bool((plen_cpu == 0).any()):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    plen = plen_cpu.to(device)
    # Each row runs up to its last wanted token only.
    last = torch.where(keep.any(-1), t - keep.flip(-1).float().argmax(-1), torch.zeros_like(plen))  # [N]
    rows, cols = keep.nonzero(as_tuple=True)  # the M wanted (row, token) pairs
    targets = completion_ids[rows, cols]  # [M]
    n_prompts = len(prompt_groups(prompt_ids)[0])
    checkpointing = any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    vision = vision if vision is not None and any(v is not None for v in vision) else None
    if vision is not None:
        if share_prompts is True:
            raise ValueError("share_prompts=True is not built for rows with images (vision-language policies)")
        share_prompts = False
    if share_prompts == "auto":
        sliding = "sliding_attention" in (getattr(model.config, "layer_types", None) or ())  # full-attention cache only
        share_prompts = not checkpointing and not sliding and n_prompts < n and is_causal(model)
    heads = int(getattr(getattr(model, "config", None), "num_attention_heads", 1) or 1)
    p_max = int(plen_cpu.max())
    if share_prompts:
        t_c = max(int(last.max()) - 1, 0)  # the last wanted token is predicted, never fed in
        scores = heads * max(n_prompts * p_max * p_max, n * t_c * (p_max + t_c))
        with attention_kernel(model, device, scores, checkpointing):
            h_last, h_comp = shared_prompt_hidden(model.get_decoder(), prompt_ids, completion_ids[:, :t_c])
        hidden = h_last[:, None] if h_comp is None else torch.cat([h_last[:, None], h_comp], 1)  # [N, 1 + Tc, H]
        h = hidden[rows, cols]  # column j holds the state that predicts completion token j
    else:
        last_cpu = last.cpu().tolist()  # one host transfer, not one per row
        seq_len = max(int(a) + b for a, b in zip(plen_cpu, last_cpu))
        ids = torch.zeros(n, seq_len, dtype=torch.long, device=device)
        for i, p in enumerate(prompt_ids):
            a, b = int(plen_cpu[i]), last_cpu[i]
            ids[i, :a] = p.to(device)
            ids[i, a : a + b] = completion_ids[i, :b]
        with attention_kernel(model, device, heads * n * seq_len * seq_len, checkpointing):
            if vision is not None:
                from covey.models.vision import vision_hidden

                hidden = vision_hidden(model, ids, vision, prompt_lengths=plen)  # [N, L, H]
            else:
                hidden = model.get_decoder()(input_ids=ids).last_hidden_state  # [N, L, H]
        h = hidden[rows, plen[rows] + cols - 1]  # [M, H]: the state that predicts each target
    lm_head = model.get_output_embeddings()

    def chunk_fn(h_c: Tensor, tgt_c: Tensor):
        logits = lm_head(h_c)
        lp, ent = token_logprobs_from_logits(logits, tgt_c, temperature, with_entropy)
        extra = ()
        if stats:
            with torch.no_grad():
                z = logits.detach().float() / temperature
                extra = tuple(token_stats_from_logits(z, torch.logsumexp(z, dim=-1), stats))
        return ((lp, ent) if with_entropy else (lp,)) + extra

    grad = torch.is_grad_enabled() and h.requires_grad
    fused = not with_entropy and type(lm_head) is torch.nn.Linear
    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else lm_head.weight.dtype
    pieces: list[tuple] = []
    for s in range(0, h.shape[0], chunk_size):
        args = (h[s : s + chunk_size], targets[s : s + chunk_size])
        if fused:
            out = HeadLogprob.apply(args[0], lm_head.weight, lm_head.bias, args[1], temperature, dtype, stats)
            pieces.append(tuple(out) if stats else (out,))
        else:
            pieces.append(checkpoint(chunk_fn, *args, use_reentrant=False) if grad else chunk_fn(*args))

    zero = hidden.sum() * 0.0 if grad else 0.0  # keeps an all-masked batch connected to the graph
    logp = torch.zeros(n, t, dtype=torch.float32, device=device) + zero
    entropy = (torch.zeros(n, t, dtype=torch.float32, device=device) + zero) if with_entropy else None
    first = 2 if with_entropy else 1  # where the statistics start in a piece
    out_stats = {name: torch.zeros(n, t, dtype=torch.float32, device=device) for name in stats}
    if pieces:
        logp = logp.index_put((rows, cols), torch.cat([p[0] for p in pieces]))
        if with_entropy:
            entropy = entropy.index_put((rows, cols), torch.cat([p[1] for p in pieces]))
        for j, name in enumerate(stats):
            out_stats[name] = out_stats[name].index_put((rows, cols), torch.cat([p[first + j] for p in pieces]).detach())
    return logp, entropy, out_stats
