"""A hand-written decoder forward with an explicit KV cache, for Llama-family HF models.

Covers the architectures whose decoder layer is RMSNorm -> attention (q/k/v/o projections, rotary
embeddings, grouped-query heads, optional q/k/v bias, optional per-head q/k RMSNorm) -> RMSNorm ->
gated MLP: transformers' Llama (SmolLM2), Qwen2, Qwen3 and Mistral (without sliding window). The
weights are read from the HF modules (no copy in the dtype the model already has, so an fp32 engine
sharing the learner's model sees its updates for free), or copied once to another dtype (bf16).
The rotary table comes from the model's own `rotary_emb` module, so its rope scaling variants hold.

Why not the HF forward: its per-call Python (mask building, cache objects, hooks) dominates a
decode step on CPU at batch 64, and it has no per-row cache compaction or forking.

The cache is one tensor `kv[L, 2, B, Hkv, S, D]`, rows (B) indexable, so a row can be dropped
(compaction), repeated (n samples per prompt) or copied (tree rollouts fork) with one index op.
Rows are left-padded: all rows write column `t` at a step; `valid[B, S]` marks real columns and
`pos[B]` is each row's own position (column minus its padding).

This module covers the tensor math; sampling, stopping and the loop live in `torch_engine.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["DecoderWeights", "decode_step", "new_cache", "pack_weights", "prefill"]

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")


@dataclass
class LayerWeights:
    ln1: Tensor
    wq: Tensor
    wk: Tensor
    wv: Tensor
    bq: Tensor | None
    bk: Tensor | None
    bv: Tensor | None
    wo: Tensor
    q_norm: Tensor | None
    k_norm: Tensor | None
    ln2: Tensor
    w_gate: Tensor
    w_up: Tensor
    w_down: Tensor
    # Fused copies (copy mode only): wq/wk/wv and w_gate/w_up are then views into these, so one
    # matmul replaces three (two) and update_weights still writes through the per-name views.
    wqkv: Tensor | None = None
    bqkv: Tensor | None = None
    w_gu: Tensor | None = None


@dataclass
class DecoderWeights:
    """The tensors of one decoder model, in the engine's compute dtype."""

    embed: Tensor  # [V, H]
    layers: list[LayerWeights]
    norm: Tensor  # [H]
    lm_head: Tensor  # [V, H]
    n_heads: int
    n_kv_heads: int
    head_dim: int
    eps: float
    scaling: float
    rope_cos: Tensor  # [P_max, D], P_max = max positions
    rope_sin: Tensor
    act: str

    def sources(self) -> list[tuple[str, Tensor]]:
        """(HF state-dict name, tensor) pairs, for refreshing a copy from a new state dict."""
        out = [("model.embed_tokens.weight", self.embed), ("model.norm.weight", self.norm)]
        out.append(("lm_head.weight", self.lm_head))
        names = {
            "ln1": "input_layernorm.weight", "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
            "wv": "self_attn.v_proj.weight", "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias",
            "bv": "self_attn.v_proj.bias", "wo": "self_attn.o_proj.weight", "q_norm": "self_attn.q_norm.weight",
            "k_norm": "self_attn.k_norm.weight", "ln2": "post_attention_layernorm.weight",
            "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight",
        }  # fmt: skip
        for i, lw in enumerate(self.layers):
            for attr, name in names.items():
                t = getattr(lw, attr)
                if t is not None:
                    out.append((f"model.layers.{i}.{name}", t))
        return out


def _check_supported(model) -> None:
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED:
        raise NotImplementedError(
            f"TorchEngine supports model_type in {SUPPORTED}, got {kind!r} ({type(model).__name__})"
        )
    if getattr(cfg, "use_sliding_window", False) or (kind == "mistral" and getattr(cfg, "sliding_window", None)):
        raise NotImplementedError(f"sliding-window attention is not supported (model_type {kind!r})")
    act = getattr(cfg, "hidden_act", "silu")
    if act not in ("silu", "gelu", "gelu_pytorch_tanh"):
        raise NotImplementedError(f"unsupported hidden_act {act!r}; supported: silu, gelu, gelu_pytorch_tanh")
    if type(model).__name__.startswith("Peft") or hasattr(model, "peft_config"):
        raise NotImplementedError("TorchEngine needs a plain HF model; merge LoRA adapters first (merge_and_unload)")


def pack_weights(model, dtype: torch.dtype, max_positions: int) -> DecoderWeights:
    """Collect `model`'s tensors in `dtype` (views of the parameters when the dtype already matches)."""
    _check_supported(model)
    base = model.model

    def cvt(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.detach().to(dtype)

    copy = base.embed_tokens.weight.dtype != dtype
    layers = []
    for layer in base.layers:
        at, mlp = layer.self_attn, layer.mlp
        qn, kn = getattr(at, "q_norm", None), getattr(at, "k_norm", None)
        lw = LayerWeights(
            ln1=cvt(layer.input_layernorm.weight), ln2=cvt(layer.post_attention_layernorm.weight),
            wq=cvt(at.q_proj.weight), wk=cvt(at.k_proj.weight), wv=cvt(at.v_proj.weight),
            bq=cvt(at.q_proj.bias), bk=cvt(at.k_proj.bias), bv=cvt(at.v_proj.bias), wo=cvt(at.o_proj.weight),
            q_norm=cvt(qn.weight) if qn is not None else None, k_norm=cvt(kn.weight) if kn is not None else None,
            w_gate=cvt(mlp.gate_proj.weight), w_up=cvt(mlp.up_proj.weight), w_down=cvt(mlp.down_proj.weight),
        )  # fmt: skip
        if copy:
            _fuse(lw)
        layers.append(lw)
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    embed = cvt(base.embed_tokens.weight)
    tied = model.lm_head.weight.data_ptr() == base.embed_tokens.weight.data_ptr()
    cos, sin = _rope_table(model, max_positions)
    return DecoderWeights(
        embed=embed,
        layers=layers,
        norm=cvt(base.norm.weight),
        lm_head=embed if tied else cvt(model.lm_head.weight),
        n_heads=cfg.num_attention_heads,
        n_kv_heads=cfg.num_key_value_heads,
        head_dim=head_dim,
        eps=float(base.norm.variance_epsilon),
        scaling=float(getattr(base.layers[0].self_attn, "scaling", head_dim**-0.5)),
        rope_cos=cos.to(dtype),
        rope_sin=sin.to(dtype),
        act=getattr(cfg, "hidden_act", "silu"),
    )


def _fuse(lw: LayerWeights) -> None:
    nq, nk = lw.wq.shape[0], lw.wk.shape[0]
    lw.wqkv = torch.cat([lw.wq, lw.wk, lw.wv])
    lw.wq, lw.wk, lw.wv = lw.wqkv[:nq], lw.wqkv[nq : nq + nk], lw.wqkv[nq + nk :]
    if lw.bq is not None:
        lw.bqkv = torch.cat([lw.bq, lw.bk, lw.bv])
        lw.bq, lw.bk, lw.bv = lw.bqkv[:nq], lw.bqkv[nq : nq + nk], lw.bqkv[nq + nk :]
    ni = lw.w_gate.shape[0]
    lw.w_gu = torch.cat([lw.w_gate, lw.w_up])
    lw.w_gate, lw.w_up = lw.w_gu[:ni], lw.w_gu[ni:]


def _rope_table(model, max_positions: int) -> tuple[Tensor, Tensor]:
    """cos, sin [max_positions, D] from the model's own rotary module (keeps its rope scaling)."""
    rot = model.model.rotary_emb
    pos = torch.arange(max_positions)[None]
    dummy = torch.zeros(1, dtype=torch.float32)
    with torch.no_grad():
        cos, sin = rot(dummy, pos)
    return cos[0].float(), sin[0].float()


def new_cache(w: DecoderWeights, batch: int, length: int, dtype: torch.dtype) -> Tensor:
    """An empty KV cache [L, 2, B, Hkv, S, D]."""
    return torch.zeros(len(w.layers), 2, batch, w.n_kv_heads, length, w.head_dim, dtype=dtype)


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # Same arithmetic as HF's LlamaRMSNorm: normalise in fp32, cast back, then scale.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # x [B, h, L, D]; cos/sin [B, 1, L, D]; HF's rotate_half convention.
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def _mlp(x: Tensor, lw: LayerWeights, act: str) -> Tensor:
    if lw.w_gu is not None:
        gate, up = F.linear(x, lw.w_gu).chunk(2, dim=-1)
    else:
        gate, up = F.linear(x, lw.w_gate), F.linear(x, lw.w_up)
    gate = F.silu(gate) if act == "silu" else F.gelu(gate, approximate="tanh" if act.endswith("tanh") else "none")
    return F.linear(gate * up, lw.w_down)


def _qkv(x: Tensor, lw: LayerWeights, w: DecoderWeights, cos: Tensor, sin: Tensor):
    # x [B, L, H] -> q [B, Hq, L, D], k, v [B, Hkv, L, D] (rotated)
    b, seq, _ = x.shape
    if lw.wqkv is not None:
        nq, nk = lw.wq.shape[0], lw.wk.shape[0]
        q, k, v = F.linear(x, lw.wqkv, lw.bqkv).split([nq, nk, nk], dim=-1)
    else:
        q, k, v = F.linear(x, lw.wq, lw.bq), F.linear(x, lw.wk, lw.bk), F.linear(x, lw.wv, lw.bv)
    q = q.reshape(b, seq, w.n_heads, w.head_dim).transpose(1, 2)
    k = k.reshape(b, seq, w.n_kv_heads, w.head_dim).transpose(1, 2)
    v = v.reshape(b, seq, w.n_kv_heads, w.head_dim).transpose(1, 2)
    if lw.q_norm is not None:
        q, k = _rms(q, lw.q_norm, w.eps), _rms(k, lw.k_norm, w.eps)
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def prefill(w: DecoderWeights, ids: Tensor, valid: Tensor, kv: Tensor) -> Tensor:
    """Run left-padded prompts ids [B, P] through the model, filling kv[:, :, :B, :, :P].

    valid [B, P] bool marks real tokens. Returns the last position's logits [B, V] (fp32).
    """
    b, p = ids.shape
    pos = (valid.long().cumsum(-1) - 1).clamp_min(0)  # [B, P]: position of each real token
    cos, sin = w.rope_cos[pos][:, None], w.rope_sin[pos][:, None]  # [B, 1, P, D]
    causal = torch.ones(p, p, dtype=torch.bool).tril()
    # A padded query sees itself only: it must not see nothing (an all-masked row gives NaN, and
    # NaN in a padded column's cache would poison every row through 0 * NaN in attention).
    mask = (causal & valid[:, None, :]) | torch.eye(p, dtype=torch.bool)  # [B, P, P]
    mask = mask[:, None]  # [B, 1, P, P]
    x = F.embedding(ids, w.embed)
    for li, lw in enumerate(w.layers):
        h = _rms(x, lw.ln1, w.eps)
        q, k, v = _qkv(h, lw, w, cos, sin)
        kv[li, 0, :b, :, :p] = k
        kv[li, 1, :b, :, :p] = v
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=w.scaling, enable_gqa=True)
        x = x + F.linear(att.transpose(1, 2).reshape(b, p, -1), lw.wo)
        x = x + _mlp(_rms(x, lw.ln2, w.eps), lw, w.act)
    last = _rms(x[:, -1], w.norm, w.eps)
    return F.linear(last, w.lm_head).float()


def decode_step(w: DecoderWeights, tok: Tensor, pos: Tensor, kv: Tensor, col: int, valid: Tensor) -> Tensor:
    """One token per row: tok [B] at positions pos [B], written to cache column `col`.

    kv is the cache view of the active rows [L, 2, B, Hkv, S, D]; valid [B, S] bool marks real
    columns (including `col`). Returns logits [B, V] in the compute dtype.
    """
    b = tok.shape[0]
    hkv, g, d = w.n_kv_heads, w.n_heads // w.n_kv_heads, w.head_dim
    cos, sin = w.rope_cos[pos][:, None, None], w.rope_sin[pos][:, None, None]  # [B, 1, 1, D]
    keep = valid[:, None, None, : col + 1]  # [B, 1, 1, t]
    x = F.embedding(tok, w.embed)[:, None]  # [B, 1, H]
    for li, lw in enumerate(w.layers):
        h = _rms(x, lw.ln1, w.eps)
        q, k, v = _qkv(h, lw, w, cos, sin)  # q [B, Hq, 1, D]; k, v [B, Hkv, 1, D]
        kv[li, 0, :, :, col] = k[:, :, 0]
        kv[li, 1, :, :, col] = v[:, :, 0]
        keys, vals = kv[li, 0, :, :, : col + 1], kv[li, 1, :, :, : col + 1]  # [B, Hkv, t, D]
        # Grouped-query decode: the G query heads sharing a KV head act as G query rows.
        q = q.view(b, hkv, g, d)
        scores = torch.matmul(q, keys.transpose(-1, -2)).float() * w.scaling  # [B, Hkv, G, t]
        probs = scores.masked_fill(~keep, float("-inf")).softmax(-1).to(vals.dtype)
        att = torch.matmul(probs, vals)  # [B, Hkv, G, D]
        x = x + F.linear(att.reshape(b, 1, hkv * g * d), lw.wo)
        x = x + _mlp(_rms(x, lw.ln2, w.eps), lw, w.act)
    return F.linear(_rms(x[:, 0], w.norm, w.eps), w.lm_head)
