"""A hand-written decoder forward with an explicit KV cache, for Llama-family HF models.

Covers the architectures whose decoder layer is RMSNorm -> attention (q/k/v/o projections, rotary
embeddings, grouped-query heads, optional q/k/v bias, optional per-head q/k RMSNorm) -> RMSNorm ->
gated MLP: transformers' Llama (SmolLM2), Qwen2, Qwen3 and Mistral (without sliding window). The
weights are read from the HF modules (no copy in the dtype the model already has, so an fp32 engine
sharing the learner's model sees its updates for free), or copied once to another dtype (bf16).
The rotary table comes from the model's own `rotary_emb` module, so its rope scaling variants hold.

Why not the HF forward: its per-call Python (mask building, cache objects, hooks) dominates a
decode step on CPU at batch 64, and it has no per-row cache compaction or forking.

The cache (`KVCache`) is two explicit tensors, keys [L, B, Hkv, D, S] (stored transposed: a decode
step's q @ K is then a plain matmul over a column prefix, ~2x faster on CPU than through a
transposed view) and values [L, B, Hkv, S, D]. Rows (B) are indexable, so a row can be dropped
(compaction), repeated (n samples per prompt) or copied (tree rollouts fork) with `gather_rows`.
Rows are left-padded: all rows write column `t` at a step; `valid[B, S]` marks real columns and
`pos[B]` is each row's own position (column minus its padding).

Devices: every tensor lives on the model's device (the weights' device); tables and masks are built
there. On CPU a bf16 copy is oneDNN pre-packed (`torch.ops.mkldnn`, CPU-only); on CUDA the weights
are plain bf16 tensors (`F.linear`) and decode attention goes through `scaled_dot_product_attention`.

int8 (`quantize="int8"`, CPU): the decoder's linear layers (q/k/v, o, gate/up, down) run as
torch's dynamically quantized linear (`torch.ops.quantized.linear_dynamic`: weights int8 per output
channel, symmetric; activations quantized per tensor on the fly from fp32, int8 matmul via fbgemm /
oneDNN, fp32 out, cast back to the engine dtype); the embedding, norms, attention and LM head stay
in the engine dtype (vLLM's and FlashRL's quantized rollouts keep the head too). `repack` re-quantizes from the fp32 copy after every weight load.
torch marks its quantized-tensor functions deprecated in favour of torchao (not a covey dependency).

fp8 (`quantize="fp8"`, CUDA with fp8 matmuls, compute capability >= 8.9): the same decoder linears as
float8 e4m3 weights with one scale per output channel (max|w| / 448) and activations quantized per
token on the fly (max|x| / 448), multiplied by `torch._scaled_mm` (row-wise scales, output in the
engine dtype, bias added after); rows are padded to a multiple of 16 for the kernel. `fp8_linear(...,
emulate=True)` computes the same product by dequantizing (any device): the reference the tests hold
the quantizer to. Refused on the CPU (use int8 there). `full_precision()` is a view of the same
weights without the quantized copies (the plain matmuls in the engine dtype): Sol-RL's regeneration.
Provenance: Sol-RL ("FP4 Explore, BF16 Train", Li et al. 2026, NVIDIA/HKU/MIT) generates a diffusion
model's rollouts in NVFP4 and optimises in BF16, regenerating only the best/worst-K candidates in
BF16; covey takes its principle for LLM rollouts (low-precision generation, full-precision learner,
the gap corrected by TIS/MIS as FlashRL does, or the chosen rows regenerated in full precision: the
`sol_rl` strategy). Reconstructed, not checked against released code; fp4 is not built.

This module covers the tensor math; sampling, stopping and the loop live in `torch_engine.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from covey.devices import host_reads_free

__all__ = ["DecoderWeights", "KVCache", "decode_step", "hidden_states", "new_cache", "pack_weights", "prefill", "step_tables"]

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
    # matmul replaces three (two) and load_weights still writes through the per-name views.
    wqkv: Tensor | None = None
    bqkv: Tensor | None = None
    w_gu: Tensor | None = None
    # oneDNN pre-packed (blocked-layout) copies of the decode matmul weights, bf16 copy mode only:
    # saves re-blocking the weight on every small-batch call. Rebuilt by `DecoderWeights.repack`.
    packed: dict[str, Tensor] = field(default_factory=dict)


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
    packed_head: Tensor | None = None
    quantize: str | None = None  # "int8" (CPU) / "fp8" (CUDA): decoder linears quantized

    def repack(self, batch_hint: int = 64) -> None:
        """(Re)build the oneDNN packed (or int8 / fp8-quantized) weights after the plain ones changed
        (no-op when unused)."""
        if self.quantize in ("int8", "fp8"):
            q = _int8 if self.quantize == "int8" else Fp8Linear.quantize
            for lw in self.layers:
                lw.packed = {"qkv": q(lw.wqkv, lw.bqkv), "o": q(lw.wo), "gu": q(lw.w_gu), "down": q(lw.w_down)}
            return
        if not (self.layers and self.layers[0].wqkv is not None and _can_pack(self.embed)):
            return
        pack = torch.ops.mkldnn._reorder_linear_weight
        for lw in self.layers:
            lw.packed = {"qkv": pack(lw.wqkv, batch_hint), "o": pack(lw.wo, batch_hint),
                         "gu": pack(lw.w_gu, batch_hint), "down": pack(lw.w_down, batch_hint)}  # fmt: skip
        self.packed_head = pack(self.lm_head, batch_hint)

    def full_precision(self) -> "DecoderWeights":
        """The same tensors without the quantized copies: plain matmuls in the engine dtype (no copy;
        meaningful for a quantized engine, whose fused copies keep the unquantized weights)."""
        import dataclasses

        return dataclasses.replace(self, layers=[dataclasses.replace(lw, packed={}) for lw in self.layers],
                                   packed_head=None, quantize=None)  # fmt: skip

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


def uses_sliding_window(cfg) -> bool:
    """Whether a config of a SUPPORTED model type turns sliding-window attention on."""
    return bool(getattr(cfg, "use_sliding_window", False) or (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None)))


def _check_supported(model) -> None:
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED:
        raise NotImplementedError(
            f"TorchEngine supports model_type in {SUPPORTED}, got {kind!r} ({type(model).__name__})"
        )
    if uses_sliding_window(cfg):
        raise NotImplementedError(f"sliding-window attention is not supported (model_type {kind!r})")
    act = getattr(cfg, "hidden_act", "silu")
    if act not in ("silu", "gelu", "gelu_pytorch_tanh"):
        raise NotImplementedError(f"unsupported hidden_act {act!r}; supported: silu, gelu, gelu_pytorch_tanh")
    if type(model).__name__.startswith("Peft") or hasattr(model, "peft_config"):
        raise NotImplementedError("TorchEngine needs a plain HF model; merge LoRA adapters first (merge_and_unload)")


def pack_weights(model, dtype: torch.dtype, max_positions: int, quantize: str | None = None) -> DecoderWeights:
    """Collect `model`'s tensors in `dtype`: views of the parameters for an fp32 model in fp32, else a
    fused (and, for bf16, oneDNN pre-packed) copy; `quantize="int8"` (CPU) adds int8 copies of the
    decoder linears (a fused copy in `dtype` keeps the weights they are quantized from)."""
    _check_supported(model)
    if quantize not in (None, "int8", "fp8"):
        raise ValueError(f"quantize must be None, 'int8' or 'fp8', got {quantize!r}")
    if quantize == "int8" and model.device.type != "cpu":
        raise ValueError(f"quantize='int8' runs on the CPU (torch's quantized linear), the model is on {model.device.type}")
    if quantize == "fp8":
        check_fp8(model.device)
    base = model.model
    # Share the parameters only for fp32 (the learner's model: weight sync is then free). bf16 always
    # gets its own fused, pre-packed copy: faster, and a bf16 learner model is rare.
    copy = base.embed_tokens.weight.dtype != dtype or dtype != torch.float32 or quantize is not None

    def cvt(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.detach().to(dtype, copy=copy)

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
    w = DecoderWeights(
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
        quantize=quantize,
    )
    w.repack()
    return w


def _can_pack(t: Tensor) -> bool:
    """oneDNN weight packing: bf16 weights on CPU only (the mkldnn ops do not exist for CUDA tensors)."""
    return (
        t.dtype == torch.bfloat16
        and t.device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def _linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed) -> Tensor:
    if packed is None:
        return F.linear(x, weight, bias)
    if isinstance(packed, Tensor):
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    if isinstance(packed, Fp8Linear):
        return fp8_linear(x, packed)
    return torch.ops.quantized.linear_dynamic(x.float(), packed).to(x.dtype)  # int8; the bias is packed with the weight


FP8_MAX = 448.0  # the largest finite float8 e4m3fn value


def fp8_available(device: torch.device) -> bool:
    """Whether `device` multiplies fp8 (CUDA, compute capability >= 8.9, torch with `_scaled_mm`)."""
    return (device.type == "cuda" and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")
            and torch.cuda.get_device_capability(device) >= (8, 9))  # fmt: skip


def check_fp8(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"quantize='fp8' needs a CUDA device with fp8 matmuls (compute capability >= 8.9); the model is "
                         f"on {device.type}: on the CPU use quantize='int8'")  # fmt: skip
    if not fp8_available(device):
        raise ValueError(f"quantize='fp8' needs fp8 matmuls (compute capability >= 8.9, e.g. Ada, Hopper); "
                         f"{torch.cuda.get_device_name(device)} has {torch.cuda.get_device_capability(device)}")  # fmt: skip


@dataclass
class Fp8Linear:
    """A linear layer's weight as float8 e4m3 [out, in] with one fp32 scale per output channel."""

    weight: Tensor
    scale: Tensor  # [out] fp32: w ~= weight.float() * scale[:, None]
    bias: Tensor | None

    @staticmethod
    def quantize(weight: Tensor, bias: Tensor | None = None) -> "Fp8Linear":
        """Symmetric per-output-channel: scale = max|w| / 448 (1e-12 at least), w / scale rounded to e4m3."""
        scale = (weight.float().abs().amax(dim=1) / FP8_MAX).clamp_min(1e-12)
        q = (weight.float() / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return Fp8Linear(q, scale, None if bias is None else bias.float())


def _fp8_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row (token) activation quantization: (e4m3 [M, K], fp32 scales [M, 1] = max|x_row| / 448)."""
    scale = (x.float().abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp_min(1e-12)
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def fp8_linear(x: Tensor, lin: Fp8Linear, *, emulate: bool = False) -> Tensor:
    """x [..., K] @ W^T (+ bias) with both operands in e4m3 (per-token and per-channel scales), output in
    x's dtype: `torch._scaled_mm` on a device with fp8 matmuls, or (`emulate`) the same product from the
    dequantized operands in fp32."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    xq, sx = _fp8_rows(x2)
    if emulate:
        out = (xq.float() * sx) @ (lin.weight.float() * lin.scale[:, None]).T
    else:
        m = x2.shape[0]
        pad = (-m) % 16  # the kernel wants the row count a multiple of 16
        if pad:
            xq = torch.cat([xq, torch.zeros(pad, xq.shape[1], dtype=xq.dtype, device=xq.device)])
            sx = torch.cat([sx, torch.ones(pad, 1, dtype=sx.dtype, device=sx.device)])
        out = torch._scaled_mm(xq, lin.weight.T, scale_a=sx, scale_b=lin.scale[None, :], out_dtype=torch.bfloat16)[:m].float()
    if lin.bias is not None:
        out = out + lin.bias
    return out.to(x.dtype).reshape(*shape[:-1], lin.weight.shape[0])


def _int8(weight: Tensor, bias: Tensor | None = None):
    """`weight` [out, in] fp32 as torch's packed int8 linear: symmetric per-output-channel scales
    max|w| / 127 (zero point 0), `bias` fp32 packed with it."""
    import warnings

    scale = (weight.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
    with warnings.catch_warnings():  # torch deprecates its quantized tensors in favour of torchao
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_channel(weight.float(), scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.float())


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
    device = model.model.embed_tokens.weight.device
    pos = torch.arange(max_positions, device=device)[None]
    dummy = torch.zeros(1, dtype=torch.float32, device=device)
    with torch.no_grad():
        cos, sin = rot(dummy, pos)
    return cos[0].float(), sin[0].float()


@dataclass
class KVCache:
    """k [L, B, Hkv, D, S] (transposed keys) and v [L, B, Hkv, S, D]; B rows, S columns."""

    k: Tensor
    v: Tensor

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    def rows(self, start: int, stop: int) -> "KVCache":
        """A view of rows [start, stop): writes through it fill this cache."""
        return KVCache(self.k[:, start:stop], self.v[:, start:stop])

    def gather_rows(self, index: Tensor, used: int) -> "KVCache":
        """Rows `index` (any order, repeats allowed) moved to the front; returns the view of them.

        Only the first `used` columns are copied (later ones are written before they are read).
        The buffer must have at least len(index) rows. Serves compaction, n-fold repeat and forks.
        """
        m = index.numel()
        self.k[:, :m, :, :, :used] = self.k[:, index, :, :, :used]
        self.v[:, :m, :, :used] = self.v[:, index, :, :used]
        return self.rows(0, m)


def new_cache(w: DecoderWeights, batch: int, length: int, dtype: torch.dtype) -> KVCache:
    """An empty cache for `batch` rows of `length` columns, on the weights' device."""
    n_layers, hkv, d, dev = len(w.layers), w.n_kv_heads, w.head_dim, w.embed.device
    return KVCache(
        k=torch.zeros(n_layers, batch, hkv, d, length, dtype=dtype, device=dev),
        v=torch.zeros(n_layers, batch, hkv, length, d, dtype=dtype, device=dev),
    )


def _decode_attention(q: Tensor, keys_t: Tensor, vals: Tensor, bias: Tensor | None, sdpa: bool) -> Tensor:
    """q [B, Hkv, G, D] (already scaled) against keys_t [B, Hkv, D, t], vals [B, Hkv, t, D] -> [B, Hkv, G, D]."""
    if sdpa:
        mask = None if bias is None else bias.to(q.dtype)
        return F.scaled_dot_product_attention(q, keys_t.transpose(-1, -2), vals, attn_mask=mask, scale=1.0)
    scores = torch.matmul(q, keys_t)  # [B, Hkv, G, t]
    if bias is not None:
        scores = scores + bias
    probs = torch.softmax(scores, -1, dtype=torch.float32).to(vals.dtype)
    return torch.matmul(probs, vals)


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
    pk = lw.packed
    if lw.w_gu is not None:
        gate, up = _linear(x, lw.w_gu, None, pk.get("gu")).chunk(2, dim=-1)
    else:
        gate, up = F.linear(x, lw.w_gate), F.linear(x, lw.w_up)
    gate = F.silu(gate) if act == "silu" else F.gelu(gate, approximate="tanh" if act.endswith("tanh") else "none")
    return _linear(gate * up, lw.w_down, None, pk.get("down"))


def _qkv(x: Tensor, lw: LayerWeights, w: DecoderWeights, cos: Tensor, sin: Tensor):
    # x [B, L, H] -> q [B, Hq, L, D], k, v [B, Hkv, L, D] (rotated)
    b, seq, _ = x.shape
    if lw.wqkv is not None:
        nq, nk = lw.wq.shape[0], lw.wk.shape[0]
        q, k, v = _linear(x, lw.wqkv, lw.bqkv, lw.packed.get("qkv")).split([nq, nk, nk], dim=-1)
    else:
        q, k, v = F.linear(x, lw.wq, lw.bq), F.linear(x, lw.wk, lw.bk), F.linear(x, lw.wv, lw.bv)
    q = q.reshape(b, seq, w.n_heads, w.head_dim).transpose(1, 2)
    k = k.reshape(b, seq, w.n_kv_heads, w.head_dim).transpose(1, 2)
    v = v.reshape(b, seq, w.n_kv_heads, w.head_dim).transpose(1, 2)
    if lw.q_norm is not None:
        q, k = _rms(q, lw.q_norm, w.eps), _rms(k, lw.k_norm, w.eps)
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def prefill(w: DecoderWeights, ids: Tensor, valid: Tensor, kv: KVCache, dense: bool | None = None) -> Tensor:
    """Run left-padded prompts ids [B, P] through the model, filling columns [0, P) of kv's B rows.

    valid [B, P] bool marks real tokens; `dense`: whether all of them are (the caller knows it on
    the host; None: read from `valid`, a host synchronisation on CUDA). Returns the last position's
    logits [B, V] (fp32).
    """
    x = _trunk(w, ids, valid, kv, dense)
    last = _rms(x[:, -1], w.norm, w.eps)
    return _linear(last, w.lm_head, None, w.packed_head).float()


def head_logits(w: DecoderWeights, h: Tensor) -> Tensor:
    """[..., V] fp32 logits of final (normed) hidden states [..., H] through the LM head."""
    return _linear(h.to(w.lm_head.dtype), w.lm_head, None, w.packed_head).float()


def hidden_states(w: DecoderWeights, ids: Tensor, valid: Tensor) -> Tensor:
    """[B, P, H] final hidden states (after the final RMSNorm, HF's `last_hidden_state`) of
    left-padded ids [B, P]; `valid` marks real tokens (padded positions hold junk). No cache."""
    return _rms(_trunk(w, ids, valid, None), w.norm, w.eps)


def _trunk(w: DecoderWeights, ids: Tensor, valid: Tensor, kv: KVCache | None, dense: bool | None = None) -> Tensor:
    """The decoder layers over left-padded ids [B, P]: the residual stream [B, P, H] before the
    final norm; keys and values go to columns [0, P) of kv's rows (when given)."""
    b, p = ids.shape
    pos = (valid.long().cumsum(-1) - 1).clamp_min(0)  # [B, P]: position of each real token
    cos, sin = w.rope_cos[pos][:, None], w.rope_sin[pos][:, None]  # [B, 1, P, D]
    dev = ids.device
    causal = torch.ones(p, p, dtype=torch.bool, device=dev).tril()
    # A padded query sees itself only: it must not see nothing (an all-masked row gives NaN, and
    # NaN in a padded column's cache would poison every row through 0 * NaN in attention).
    mask = (causal & valid[:, None, :]) | torch.eye(p, dtype=torch.bool, device=dev)  # [B, P, P]
    dense = bool(valid.all()) if dense is None else dense
    mask = None if dense else mask[:, None]  # [B, 1, P, P]; none: the plain causal kernel
    x = F.embedding(ids, w.embed)
    for li, lw in enumerate(w.layers):
        h = _rms(x, lw.ln1, w.eps)
        q, k, v = _qkv(h, lw, w, cos, sin)
        if kv is not None:
            kv.k[li, :, :, :, :p] = k.transpose(-1, -2)
            kv.v[li, :, :, :p] = v
        att = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, scale=w.scaling, enable_gqa=True
        )
        x = x + _linear(att.transpose(1, 2).reshape(b, p, -1), lw.wo, None, lw.packed.get("o"))
        x = x + _mlp(_rms(x, lw.ln2, w.eps), lw, w.act)
    return x


def step_tables(w: DecoderWeights, pos: Tensor, valid: Tensor, col: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """Per-step rotary tables and attention bias, shared by all layers.

    Returns cos, sin [B, Hq + Hkv, D] (query heads pre-multiplied by the attention scaling, and sin
    signed so that rotation = x * cos + roll(x, D/2) * sin), and bias [B, 1, 1, t] (0 or -inf; on
    CPU None when every column up to `col` is valid).
    """
    half = w.head_dim // 2
    cos, sin = w.rope_cos[pos], w.rope_sin[pos]  # [B, D]
    sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)
    # Filled on the device: a table built from a Python list is a host-to-device copy, on CUDA one
    # host synchronisation per decode step.
    heads = torch.cat([torch.full((w.n_heads, 1), w.scaling, dtype=cos.dtype, device=cos.device),
                       torch.ones(w.n_kv_heads, 1, dtype=cos.dtype, device=cos.device)])  # [Hq+Hkv, 1]  # fmt: skip
    cos, sin = cos[:, None] * heads, sin[:, None] * heads  # [B, Hq+Hkv, D]
    seen = valid[:, : col + 1]
    bias = None
    if not host_reads_free(seen.device) or not bool(seen.all()):  # on CUDA: always a bias, no host round trip
        bias = torch.zeros(seen.shape, dtype=cos.dtype, device=cos.device).masked_fill_(~seen, float("-inf"))[:, None, None]
    return cos, sin, bias


def decode_step(
    w: DecoderWeights, tok: Tensor, pos: Tensor, kv: KVCache, col: int, valid: Tensor, sdpa: bool | None = None,
    embeds: Tensor | None = None,
) -> Tensor:
    """One token per row: tok [B] at positions pos [B], written to cache column `col`.

    kv holds exactly the active rows; valid [B, S] bool marks real
    columns (including `col`). Returns logits [B, V] in the compute dtype.
    sdpa: attention through `scaled_dot_product_attention` (default: on CUDA; on CPU the plain
    matmuls over the transposed key cache are faster at decode sizes).
    embeds: [B, H] input vectors instead of the tokens' embeddings (soft thinking's mixtures; `covey.engine.soft`).
    """
    if sdpa is None:
        sdpa = tok.device.type == "cuda"
    b = tok.shape[0]
    hq, hkv, d = w.n_heads, w.n_kv_heads, w.head_dim
    g, nq, nk = hq // hkv, hq * d, hkv * d
    cos, sin, bias = step_tables(w, pos, valid, col)
    x = F.embedding(tok, w.embed) if embeds is None else embeds.to(w.embed.dtype).clone()  # [B, H]
    h_dim = x.shape[-1]
    for li, lw in enumerate(w.layers):
        h = F.rms_norm(x, (h_dim,), lw.ln1, w.eps)
        pk = lw.packed
        if lw.wqkv is not None:
            qkv = _linear(h, lw.wqkv, lw.bqkv, pk.get("qkv"))  # [B, nq + 2 nk]
            qk, v = qkv[:, : nq + nk].view(b, hq + hkv, d), qkv[:, nq + nk :]
        else:
            qk = torch.cat([F.linear(h, lw.wq, lw.bq), F.linear(h, lw.wk, lw.bk)], dim=-1).view(b, hq + hkv, d)
            v = F.linear(h, lw.wv, lw.bv)
        if lw.q_norm is not None:  # Qwen3: per-head RMSNorm of q and k before the rotation
            qk = torch.cat([F.rms_norm(qk[:, :hq], (d,), lw.q_norm, w.eps), F.rms_norm(qk[:, hq:], (d,), lw.k_norm, w.eps)], 1)
        qk = torch.addcmul(qk * cos, qk.roll(d // 2, dims=-1), sin)  # rotary; q also scaled
        kv.k[li, :, :, :, col] = qk[:, hq:]
        kv.v[li, :, :, col] = v.view(b, hkv, d)
        keys_t, vals = kv.k[li, :, :, :, : col + 1], kv.v[li, :, :, : col + 1]  # [B, Hkv, D, t], [B, Hkv, t, D]
        # Grouped-query decode: the G query heads sharing a KV head act as G query rows.
        q = qk[:, :hq].contiguous().view(b, hkv, g, d)  # a strided q slows the matmul
        att = _decode_attention(q, keys_t, vals, bias, sdpa).reshape(b, nq)  # [B, Hq * D]
        x.add_(_linear(att, lw.wo, None, pk.get("o")))
        x.add_(_mlp(F.rms_norm(x, (h_dim,), lw.ln2, w.eps), lw, w.act))
    return _linear(F.rms_norm(x, (h_dim,), w.norm, w.eps), w.lm_head, None, w.packed_head)
