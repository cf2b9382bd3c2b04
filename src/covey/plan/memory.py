"""The memory of a run on each device, estimated from the model's shape and the run's settings.

Two pools: the learner (one device per rank) and the engine (one device per actor). Each is a list
of `Item`s in bytes with the phase that holds them:

    static     through the whole update: weights, gradients, optimizer state, reference model
    backward   at the end of a micro-batch's forward, through its backward: activations, bf16 weight
               copies, FSDP2's gathered layers, the head's logits for one chunk
    step       at the optimizer step: DDP's flat all-reduce buffer

and a device's peak is static + the largest of the others (the engine's are "generate"). Summing a micro-batch's backward
items with all gradients is exact from the second micro-batch of an update on (the first builds
its gradients while its activations are freed), so with one micro-batch it is an upper bound.

Learner, per rank (bytes per parameter P, trainable parameters P_t):
- weights fp32 (4 P: covey's policy keeps fp32 weights and autocasts), gradients fp32 (4 P_t), AdamW
  exp_avg + exp_avg_sq fp32 (8 P_t); a frozen fp32 reference copy (4 P) when the loss or reward
  reads reference log-probs (a KL term) and the policy is not LoRA (LoRA's reference is the base
  with adapters off). LoRA: P counts the frozen base plus the adapters, P_t only the adapters.
- fsdp2 (`covey.runtime.sharded`): those divided by `runtime.learner_workers` (sharded), plus the
  gathered units: the root (embedding, final norm, head) and two decoder layers (the one computing
  and the one prefetched), and one unit's unsharded gradient before its reduce-scatter; on CUDA in
  bf16 (the mixed-precision policy; the gradient then in fp32 for the reduction), elsewhere in fp32.
  `runtime.fsdp_offload`: the sharded state in host memory instead.
- bf16 without FSDP2's mixed precision (ddp, one process, fsdp2 on the CPU): autocast's bf16 copies
  of every decoder-layer weight (2 bytes each), kept for the backward. With learner_workers >= 2 the gradients are summed through one flat buffer
  (4 P_t, at the step: `covey.runtime.data_parallel.all_reduce_grads`).
- activations of one micro-batch (rows per rank = micro_batch_size, at most the rank's share of a
  mini-batch), counted per token and layer from what autograd saves in transformers' Llama/Qwen2
  layers under covey's learner (checked against saved-tensor hooks on tiny-llama): the fp32
  residual stream through two RMSNorms (16 H), the linear layers' inputs (bf16: five casts of the
  normed input and the attention output, c (5 H + q); fp32: 4 (2 H + q)), the gated MLP (4 c I),
  attention's q, k, v (c (q + 2 kv)); c = bytes of the compute dtype, q = heads x head_dim, kv =
  kv_heads x head_dim. Attention itself: a fused kernel on CUDA (its output and log-sum-exp), on the
  CPU covey's grouped-query kernel for short sequences, which keeps the fp32 and bf16 score
  matrices (heads x queries x keys). Tokens: with prompt sharing (the default when a group has
  several rows and gradient checkpointing is off) each distinct prompt once plus each row's
  completion, and each row keeps its own copy of the prompt's keys and values; otherwise every row's
  prompt + completion. Gradient checkpointing keeps each layer's fp32 input (4 H per token) and
  recomputes one layer at a time. Plus the final norm (8 H per token) and the head's inputs (4 H per
  completion token).
- the head (`covey.learner.logprobs.HeadLogprob`), 512 tokens at a time: the chunk's logits (fp32
  and the compute dtype) and, in its backward, the weight in the compute dtype and the weight's
  gradient (compute dtype, then fp32).

Engine, per actor (`covey.engine.torch_engine.TorchEngine`; vllm below):
- weights: the model the engine is built from, when it is not the learner's own (4 P: a Ray actor's
  copy, the thread executor's copy, LoRA's merged copy), plus the bf16 fused copy (2 P) for a bf16
  engine; on the CPU oneDNN's packed copies of the matmul weights as well (2 bytes each).
- KV cache: rows of one wave x (prompt + max_new_tokens) x layers x 2 x kv_heads x head_dim x bytes,
  where a wave is at most `max_rows` rows and `max_cache_bytes` of cache, in whole prompts (the
  engine's own rule), of the actor's share of the step's prompts.
- sampling buffers: fp32 logits and two fp32 [rows, V] work tensors, and the decode logits.
- vllm: it takes `gpu_memory_utilization` of the device (default 0.5) for weights and KV cache; the
  plan reports that share, and whether the weights and the step's KV cache fit in it.

Not counted: the CUDA context and allocator slack (~0.5-1 GiB per process on a GPU), the driver
process of a Ray run (it loads the policy too), activations of no-grad passes (reference and old
log-probs: one layer at a time), the prefill attention of the engine, NCCL buffers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from covey.plan.arch import Architecture

__all__ = ["GiB", "Item", "Pool", "Settings", "engine_pool", "learner_pool"]

GiB = float(2**30)
HEAD_CHUNK = 512  # covey.learner.logprobs.completion_logprobs_stats' chunk_size
GQA_MAX_SCORES = 4_000_000  # covey.learner.attention.MAX_SCORES


@dataclass(frozen=True)
class Item:
    name: str
    bytes: float
    phase: str = "static"  # static | backward | step | generate
    where: str = "device"  # device | host
    note: str = ""


@dataclass
class Pool:
    name: str  # "learner" | "engine"
    devices: int
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reserved: float = 0.0  # bytes the pool takes whatever it needs (vLLM's gpu_memory_utilization share)

    def phase(self, phase: str, where: str = "device") -> float:
        return sum(i.bytes for i in self.items if i.phase == phase and i.where == where)

    @property
    def transient(self) -> float:
        """The largest non-static phase on each device."""
        return max((self.phase(p) for p in {i.phase for i in self.items} - {"static"}), default=0.0)

    @property
    def peak(self) -> float:
        """Bytes on each device of the pool at its peak."""
        return max(self.phase("static") + self.transient, self.reserved)

    @property
    def host(self) -> float:
        """Host memory per device of the pool (offloaded state)."""
        return sum(i.bytes for i in self.items if i.where == "host")


@dataclass(frozen=True)
class Settings:
    """What a plan needs from a run config (`covey.plan.plan_config` fills it)."""

    device: str  # "cuda" | "cpu"
    dtype: str  # learner compute: "bf16" | "fp32"
    prompts_per_step: int
    group_size: int
    prompt_tokens: int
    new_tokens: int
    micro_batch_size: int | None = None
    mini_batches: int = 1
    gradient_checkpointing: bool = False
    lora_rank: int | None = None
    lora_targets: str | tuple[str, ...] = "all-linear"
    reference: bool = False  # a frozen reference model (KL) is held
    executor: str = "inline"
    learner_workers: int = 1
    engine_workers: int = 1
    sharding: str = "ddp"
    fsdp_offload: bool = False
    colocate: bool = False
    engine: str = "torch"
    engine_dtype: str = "bf16"
    engine_max_rows: int = 256
    engine_max_cache_bytes: int = 2 << 30
    vllm_memory_fraction: float = 0.5


def _compute_bytes(dtype: str) -> int:
    return 2 if dtype == "bf16" else 4


def learner_micro_rows(s: Settings) -> int:
    """Rows of one micro-batch on one learner rank."""
    ranks = s.learner_workers if s.executor == "ray" else 1
    mini = math.ceil(s.prompts_per_step * s.group_size / s.mini_batches)
    per_rank = math.ceil(mini / ranks)
    return min(s.micro_batch_size or per_rank, per_rank)


def activation_bytes(a: Architecture, s: Settings, rows: int) -> tuple[float, str]:
    """Bytes autograd keeps for one micro-batch of `rows` rows (see the module docstring), and how the
    tokens were counted."""
    c = _compute_bytes(s.dtype)
    h, q, kv, i = a.hidden, a.q_dim, a.kv_dim, a.intermediate
    p, t = s.prompt_tokens, s.new_tokens
    share = s.group_size > 1 and not s.gradient_checkpointing
    linear_in = c * (5 * h + q) if c == 2 else 4 * (2 * h + q)
    per_token = 16 * h + linear_in + 4 * c * i  # one layer, without attention
    qkv = c * (q + 2 * kv)
    if share:  # distinct prompts once; completions attend to their row's copy of the prompt's K/V
        prompts = math.ceil(rows / s.group_size)
        tokens, queries = prompts * p + rows * t, rows * t
        kv_rows = rows * c * 2 * kv * (p + t)  # each row's concatenated K and V, per layer
        how = f"{prompts} prompt(s) x {p} + {rows} rows x {t} tokens (shared prompts)"
    else:
        tokens, queries, kv_rows = rows * (p + t), rows * (p + t), 0
        how = f"{rows} rows x {p + t} tokens"
    keys = p + t
    scores = a.heads * queries * keys  # per layer
    if s.device == "cpu" and not s.gradient_checkpointing and scores <= GQA_MAX_SCORES:
        attention = scores * (4 + (c if c != 4 else 0))  # covey's CPU kernel: fp32 softmax + compute-dtype probs
    else:
        attention = tokens * (c * q + 4 * a.heads)  # fused kernel: output + log-sum-exp
        if share:  # a mask: transformers repeats K/V to every query head
            kv_rows *= a.heads / a.kv_heads
    layer = tokens * (per_token + qkv) + attention + kv_rows
    if s.gradient_checkpointing:
        total = a.layers * tokens * 4 * h + layer  # each layer's input; one layer recomputed at a time
        how += ", gradient checkpointing"
    else:
        total = a.layers * layer
    total += tokens * 8 * h + rows * t * 4 * h  # final norm; the head's inputs
    return float(total), how


def head_bytes(a: Architecture, s: Settings, rows: int, trainable_head: bool) -> float:
    """The head's transient memory for one chunk (see the module docstring). Under fsdp2 the head's
    weight is gathered in the compute dtype already: no copy, and its gradient stays in that dtype."""
    c = _compute_bytes(s.dtype)
    chunk = min(HEAD_CHUNK, rows * s.new_tokens)
    logits = chunk * a.vocab * (4 + 2 * c if c == 2 else 8)
    if s.sharding == "fsdp2" and s.executor == "ray" and s.device == "cuda" and c == 2:
        per_weight = c if trainable_head else 0
    else:  # the weight cast to the compute dtype; its gradient in that dtype, then in the weight's fp32
        per_weight = (c if c == 2 else 0) + ((c + 4 if c == 2 else 4) if trainable_head else 0)
    return float(logits + a.vocab * a.hidden * per_weight)


def learner_pool(a: Architecture, s: Settings) -> Pool:
    """Bytes on each learner device."""
    ranks = s.learner_workers if s.executor == "ray" else 1
    fsdp = s.sharding == "fsdp2"
    shard = ranks if fsdp else 1
    lora = s.lora_rank is not None
    adapters = a.lora(s.lora_rank, s.lora_targets) if lora else 0
    weights = a.total + adapters
    trainable = adapters if lora else a.total
    c = _compute_bytes(s.dtype)
    state = "host" if fsdp and s.fsdp_offload else "device"
    part = f" / {shard} ranks" if shard > 1 else ""
    pool = Pool("learner", ranks)
    add = pool.items.append
    add(Item("weights", 4 * weights / shard, where=state,
             note=f"fp32{part}" + (f"; LoRA: frozen base + {adapters / 1e6:.1f}M adapter params" if lora else "")))  # fmt: skip
    add(Item("gradients", 4 * trainable / shard, where=state, note=f"fp32{part}"))
    add(Item("optimizer state", 8 * trainable / shard, where=state, note=f"AdamW exp_avg + exp_avg_sq, fp32{part}"))
    if s.reference and not lora:
        add(Item("reference model", 4 * a.total / shard, where=state, note=f"frozen fp32 copy for the KL term{part}"))
    rows = learner_micro_rows(s)
    mixed = fsdp and s.device == "cuda" and c == 2  # covey.runtime.sharded: bf16 gathers, fp32 reduction
    if fsdp:
        g = c if mixed else 4  # without the mixed-precision policy (CPU, fp32) the shards are gathered in fp32
        unit = a.lora(s.lora_rank, s.lora_targets) // a.layers if lora else max(a.root, a.layer)
        add(Item("gathered units", (a.root + 2 * a.layer) * g, "backward",
                 note=f"root + 2 layers in {'bf16' if g == 2 else 'fp32'} (FSDP2 all-gather)"))  # fmt: skip
        add(Item("unsharded gradient", unit * (g + 4 if g == 2 else 4), "backward", note="one unit, before its reduce-scatter"))
    if not mixed and c == 2:
        copies = a.layer_matmul * (1 if lora and s.gradient_checkpointing else a.layers)
        add(Item("bf16 weight copies", 2 * copies, "backward", note="autocast's casts, kept for the backward"))
    act, how = activation_bytes(a, s, rows)
    add(Item("activations", act, "backward", note=f"micro-batch: {how}"))
    other = activation_bytes(a, dataclasses.replace(s, gradient_checkpointing=not s.gradient_checkpointing), rows)[0]
    pool.notes.append(f"activations {'without' if s.gradient_checkpointing else 'with'} gradient checkpointing: "
                      f"{other / GiB:.2f} GiB per micro-batch (model.gradient_checkpointing)")  # fmt: skip
    add(Item("head logits", head_bytes(a, s, rows, trainable_head=not lora), "backward",
             note=f"{min(HEAD_CHUNK, rows * s.new_tokens)} tokens x {a.vocab} vocab"))  # fmt: skip
    if ranks > 1 and not fsdp:
        add(Item("all-reduce buffer", 4 * trainable, "step", note="ddp: the gradients flattened for one all-reduce"))
    return pool


def engine_rows(s: Settings, row_bytes: int) -> tuple[int, int]:
    """(rows of the step one engine actor generates, rows of one of its waves): the torch engine's rule
    (`TorchEngine._generate_all`): at most max_rows rows and max_cache_bytes of cache, whole prompts."""
    actors = s.engine_workers if s.executor == "ray" else 1
    prompts = math.ceil(s.prompts_per_step / actors)
    rows = min(s.engine_max_rows, max(1, s.engine_max_cache_bytes // max(row_bytes, 1)))
    per = max(1, rows // s.group_size)
    return prompts * s.group_size, min(per, prompts) * s.group_size


def engine_pool(a: Architecture, s: Settings, device_bytes: float) -> Pool:
    """Bytes on each engine device."""
    actors = s.engine_workers if s.executor == "ray" else 1
    e = _compute_bytes(s.engine_dtype)
    seq = s.prompt_tokens + s.new_tokens
    pool = Pool("engine", actors)
    add = pool.items.append
    if s.engine == "vllm":
        rows = math.ceil(s.prompts_per_step / actors) * s.group_size
        add(Item("weights", e * a.total, note=f"{s.engine_dtype}"))
        add(Item("KV cache", rows * seq * a.kv_bytes_per_token(e), note=f"{rows} rows x {seq} tokens"))
        pool.reserved = s.vllm_memory_fraction * device_bytes
        need = sum(i.bytes for i in pool.items)
        pool.notes.append(f"vLLM takes gpu_memory_utilization={s.vllm_memory_fraction:g} of the device "
                          f"({pool.reserved / GiB:.1f} GiB); the weights and the step's KV cache need {need / GiB:.1f} GiB"
                          + ("" if need <= pool.reserved else ": raise gpu_memory_utilization"))  # fmt: skip
        return pool
    own_copy = s.executor in ("ray", "thread") or s.lora_rank is not None
    if own_copy:
        why = {"ray": "the actor's", "thread": "the generator thread's"}.get(s.executor, "LoRA's merged")
        add(Item("model copy", 4 * a.total, note=f"fp32, {why} copy it is built from"))
    if e == 2:
        add(Item("bf16 weights", 2 * a.total, note="fused copy"))
        if s.device == "cpu":
            add(Item("oneDNN packed weights", 2 * (a.layers * a.layer_matmul + a.embed), note="CPU only"))
    row_bytes = seq * a.kv_bytes_per_token(e)
    rows, wave = engine_rows(s, row_bytes)
    add(Item("KV cache", wave * row_bytes, "generate", note=f"{wave} of {rows} rows x {seq} tokens"))
    add(Item("sampling buffers", wave * a.vocab * (12 + e), "generate", note=f"{wave} rows x {a.vocab} vocab"))
    return pool
