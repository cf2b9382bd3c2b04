"""Next-token sampling: temperature, top-k / top-p / min-p truncation, seeded draws, log-probs.

Which distribution the behaviour log-probs are of: the TEMPERED FULL distribution,
`log softmax(logits / temperature)`, before any top-k/top-p/min-p truncation. That is what the
learner can recompute by teacher forcing (`covey.learner.logprobs.completion_logprobs` with the same
temperature), so the importance ratio pi_theta / pi_behaviour is exactly 1 at the start of an update
when no truncation is used. With truncation the tokens are drawn from the renormalised truncated
distribution but the reported log-prob is still that of the full tempered one (as verl and
vLLM's default "raw" log-probs do for the trainer); entropies are of the same full tempered
distribution. Greedy decoding takes the argmax of the logits and reports the same tempered log-prob.

Truncation order follows transformers' sampling: top-k, then top-p, then min-p, each on the
previous result. Draws use (two-level) inverse-CDF sampling with one uniform number per (row, step) taken
from a `torch.Generator`, so a row's tokens depend only on its own uniforms and logits: dropping other
rows from the batch (compaction) or reordering them does not change them.

Devices: everything runs on the logits' device without a host synchronisation (no `.item()` or
`bool(...)` on device tensors) wherever host reads are not free (`covey.devices.host_reads_free`:
CUDA). On the CPU two shortcuts read a value: top-p first tries the 1024 best tokens (on CUDA it
sorts the whole vocabulary: cheap there, and no round trip to the host), and the inverse-CDF draw
skips its zero-probability fallback when no row needs it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from covey.devices import host_reads_free

__all__ = ["filter_logits", "inverse_cdf", "sample_tokens", "validate_sampling"]

_TOPP_PREFIX = 1024  # top-p first looks at this many best tokens; a full sort only when their mass is short


def validate_sampling(temperature: float, top_p: float, top_k: int, min_p: float, max_new_tokens: int) -> None:
    """Raise ValueError naming the bad field."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (for argmax decoding set greedy=True), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1.0 disables it), got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if not 0.0 <= min_p < 1.0:
        raise ValueError(f"min_p must be in [0, 1) (0.0 disables it), got {min_p}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def filter_logits(logits: Tensor, *, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> Tensor:
    """Set truncated tokens' logits to -inf. logits [B, V] (already divided by temperature).

    top_k: keep the k largest logits (ties with the k-th are kept, as in transformers).
    top_p: keep the smallest set of best tokens whose probability reaches top_p: a token is
           dropped when the mass of the tokens ranked above it is already >= top_p (the best
           token is always kept).
    min_p: drop tokens whose probability is below min_p * (largest probability).
    Returns a new tensor; the input is not modified. At least one token always survives.
    """
    out = logits
    v = logits.shape[-1]
    if 0 < top_k < v:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]  # [B, 1]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        out = _top_p(out, top_p)
    if min_p > 0.0:
        probs = out.softmax(-1)
        out = out.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, float("-inf"))
    return out if out is not logits else logits.clone()


def _top_p(logits: Tensor, top_p: float) -> Tensor:
    probs = logits.softmax(-1)
    k = min(_TOPP_PREFIX, logits.shape[-1]) if host_reads_free(logits.device) else logits.shape[-1]
    vals, idx = torch.topk(probs, k, dim=-1)  # sorted descending
    if k < logits.shape[-1] and not bool((vals.sum(-1) >= top_p).all()):
        vals, idx = torch.sort(probs, dim=-1, descending=True)  # rare: a very flat distribution
    before = vals.cumsum(-1) - vals  # mass ranked strictly above each token
    keep_sorted = before < top_p
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, idx, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def sample_tokens(
    logits: Tensor,
    *,
    temperature: float | Tensor,
    greedy: bool,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    uniforms: Tensor | None = None,
    with_entropy: bool = False,
    scratch: dict | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Pick one token per row. logits [B, V] (any float dtype); uniforms [B] in [0, 1) (unless greedy).

    Returns tokens [B] long, their log-probs [B] fp32 under softmax(logits / temperature) (see the
    module docstring), and the entropy [B] of that distribution when `with_entropy`. `temperature`
    may be a [B] tensor (one temperature per row: a temperature rule).
    `scratch`: a dict the caller keeps across steps; the two [B, V] fp32 work tensors live in it
    (a fresh 12 MB tensor per step costs page faults that rival the arithmetic on CPU).
    """
    b, v = logits.shape
    z = _buffer(scratch, "z", b, v, logits.device).copy_(logits)  # fp32 copy of the logits
    if isinstance(temperature, Tensor):
        z.div_(temperature.to(z)[:, None])
    elif temperature != 1.0:
        z.div_(temperature)  # the same op as the learner's z / T, so both round alike
    # log p = z - lse with lse = m + log(sum exp(z - m)): the learner's logsumexp formula, and no
    # normalisation pass over [B, V] (the draw works on unnormalised weights).
    m = z.amax(-1, keepdim=True)  # [B, 1]
    weights = torch.sub(z, m, out=_buffer(scratch, "w", b, v, logits.device)).exp_()  # [B, V], the largest is 1
    total = weights.sum(-1)  # [B]
    lse = m.squeeze(-1) + total.log()  # [B]
    if greedy:
        tokens = z.argmax(-1)
    else:
        if uniforms is None:
            raise ValueError("sample_tokens needs `uniforms` [B] unless greedy=True")
        if top_k or top_p < 1.0 or min_p > 0.0:
            draw = filter_logits(z, top_k=top_k, top_p=top_p, min_p=min_p).softmax(-1)
        else:
            draw = weights
        tokens = inverse_cdf(draw, uniforms)
    logp = z.gather(-1, tokens[:, None]).squeeze(-1) - lse
    entropy = None
    if with_entropy:  # H = lse - sum p z; a batched dot keeps the [B, V] product out of memory
        entropy = lse - torch.bmm(weights[:, None, :], z[:, :, None]).view(b) / total
    return tokens, logp, entropy


def _buffer(scratch: dict | None, key: str, b: int, v: int, device: torch.device) -> Tensor:
    if scratch is None:
        return torch.empty(b, v, device=device)
    buf = scratch.get(key)
    if buf is None or buf.shape[0] < b or buf.shape[1] != v or buf.device != device:
        buf = scratch[key] = torch.empty(b, v, device=device)
    return buf[:b]


_BLOCK = 256


def inverse_cdf(probs: Tensor, uniforms: Tensor) -> Tensor:
    """Draw one index per row from probs [B, V] (non-negative, any total) with uniforms [B] in [0, 1).

    Two-level inverse CDF: find the block of 256 tokens holding the target mass, then the token
    inside it, which avoids a sequential cumulative sum over the whole vocabulary. A token of zero
    probability is never returned (a rounding edge case falls back to the row's most likely token).
    """
    b, v = probs.shape
    nb = -(-v // _BLOCK)
    padded = F.pad(probs, (0, nb * _BLOCK - v)) if nb * _BLOCK != v else probs
    blocks = padded.view(b, nb, _BLOCK)
    bsum = blocks.sum(-1)  # [B, nb]
    cum = bsum.cumsum(-1)  # [B, nb]
    target = uniforms.to(cum.dtype)[:, None] * cum[:, -1:]  # [B, 1]
    bi = torch.searchsorted(cum, target, right=True).clamp_max(nb - 1)  # [B, 1]
    rest = target - (cum.gather(-1, bi) - bsum.gather(-1, bi))  # mass still to cover inside the block
    inner = blocks[torch.arange(b, device=probs.device), bi.squeeze(-1)].cumsum(-1)  # [B, 256]
    j = torch.searchsorted(inner, rest, right=True).clamp_max(_BLOCK - 1)
    tokens = (bi * _BLOCK + j).squeeze(-1).clamp_max(v - 1)
    zero = probs.gather(-1, tokens[:, None]).squeeze(-1) <= 0
    if host_reads_free(probs.device):  # on CPU the check is cheaper than the argmax
        return torch.where(zero, probs.argmax(-1), tokens) if bool(zero.any()) else tokens
    return torch.where(zero, probs.argmax(-1), tokens)  # no host synchronisation
