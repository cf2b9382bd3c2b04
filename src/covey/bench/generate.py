"""Generation benchmark: covey's TorchEngine against HF `generate` on the same model and prompts.

Both get the same random-token prompts (equal lengths, so HF needs no padding) and produce exactly
`new_tokens` tokens per row (EOS ignored: HF via min_new_tokens, covey via ignore_eos), sampling at
temperature 1 with no truncation. Runs alternate (covey, HF, covey, HF, ...) so both see the same
machine load; the reported ratio is of the medians in this one run. Throughput counts generated
tokens only (batch x new_tokens per run; the prefill time is included in the run time).

Achieved FLOP/s: 2 x (matmul parameters, lm_head included, embedding lookup excluded) per token
processed (prompt + generated), plus attention 4 x layers x heads x head_dim x context per token,
divided by covey's time; `ceiling_fraction` compares it with the ~1 TFLOP/s AMX bf16 matmul peak
of this machine (fp32 peak is ~0.3 TFLOP/s); on CUDA it is left out (no peak known for the GPU).

device: cpu, cuda, cuda:N or auto (CUDA when present); both engines run there, and the timers wait
for the GPU (`torch.cuda.synchronize`).

hf_static: also time HF `generate` with `cache_implementation="static"` (a pre-allocated cache; on
CUDA transformers then compiles the decode step, in the untimed warm-up run): "auto" = on CUDA
only (on CPU HF does not compile it and it is no faster), "yes", "no". Reported as
`hf_static_tok_s` and `ratio_vs_hf_static`. dtype: bf16, fp32, or auto (`covey.dtypes`; the
result names the dtype chosen); `bench_generate_dtypes` (CLI `--dtype both`) runs a pair per dtype
and compares each engine at its faster one (on one 2-core AVX512-BF16 CPU bf16 matmuls ran at ~2x
fp32, on another at ~0.7x).
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from covey.devices import resolve_device
from covey.engine.base import SamplingParams
from covey.dtypes import PAIR_DTYPES, check_pair_dtypes, resolve_dtype_name
from covey.engine.torch_engine import TorchEngine
from covey.learner.learner import peak_memory_gb, reset_peak_memory

__all__ = ["bench_generate", "bench_generate_dtypes", "generate_cmd"]

BF16_PEAK_FLOPS = 1.0e12
FP32_PEAK_FLOPS = 0.3e12


def _matmul_params(model) -> int:
    emb = model.get_input_embeddings().weight
    total = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and p is not emb)
    tied = model.get_output_embeddings().weight is emb
    return total + (emb.numel() if tied else 0)


def _flops(model, batch: int, prompt_tokens: int, new_tokens: int) -> float:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    tokens = batch * (prompt_tokens + new_tokens)
    attn_per_ctx = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim
    # prefill: context grows 1..P (mean P/2); decode: context P..P+new (mean P + new/2)
    ctx = batch * (prompt_tokens * prompt_tokens / 2 + new_tokens * (prompt_tokens + new_tokens / 2))
    return 2.0 * _matmul_params(model) * tokens + attn_per_ctx * ctx


def bench_generate(
    model: str = "tiny-llama",
    batch: int = 64,
    prompt_tokens: int = 32,
    new_tokens: int = 64,
    dtype: str = "bf16",
    repeats: int = 3,
    seed: int = 0,
    threads: int = 0,
    device: str = "auto",
    hf_static: str = "auto",
) -> dict:
    """Time covey's engine and HF generate on `model` (an alias or path); return one result dict.

    threads: torch intra-op threads for both (0: leave torch's default). On a shared, oversubscribed
    machine 1 thread can beat 2 by a wide margin (OpenMP threads wait on each other).
    """
    from covey.models import load

    if threads:
        torch.set_num_threads(threads)
    if dtype not in ("bf16", "fp32", "auto"):
        raise ValueError(f"dtype must be 'bf16', 'fp32' or 'auto', got {dtype!r}")
    if hf_static not in ("auto", "yes", "no"):
        raise ValueError(f"hf_static must be 'auto', 'yes' or 'no', got {hf_static!r}")
    if min(batch, prompt_tokens, new_tokens, repeats) < 1:
        raise ValueError("batch, prompt_tokens, new_tokens and repeats must all be >= 1")
    dev = resolve_device(device)
    hf_model, tok = load(model)
    dtype = resolve_dtype_name(dtype, dev, hf_model.config.hidden_size)
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    hf_model.to(dev, torch_dtype)
    engine = TorchEngine(hf_model, dtype=dtype, tokenizer=tok)
    gen = torch.Generator().manual_seed(seed)
    low = 5 if hf_model.config.vocab_size > 10 else 0  # skip the special-token ids of the tiny vocab
    prompts = torch.randint(low, hf_model.config.vocab_size, (batch, prompt_tokens), generator=gen)
    hf_prompts = prompts.to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=seed, ignore_eos=True)
    hf_kwargs = dict(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
    )  # fmt: skip

    def run_covey() -> float:
        sync()
        t0 = time.perf_counter()
        out = engine.generate(list(prompts), 1, sampling)  # returns CPU tensors: already waited for
        dt = time.perf_counter() - t0
        assert out.completion_ids.shape == (batch, new_tokens)
        return dt

    def run_hf(**extra) -> float:
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = hf_model.generate(hf_prompts, attention_mask=torch.ones_like(hf_prompts), **hf_kwargs, **extra)
        sync()
        dt = time.perf_counter() - t0
        assert out.shape == (batch, prompt_tokens + new_tokens)
        return dt

    static = hf_static == "yes" or (hf_static == "auto" and dev.type == "cuda")
    run_covey()  # warm-up (allocator, thread pool, oneDNN kernels; HF static: its compilation)
    run_hf()
    if static:
        run_hf(cache_implementation="static")
    covey_t, hf_t, static_t = [], [], []
    peaks: dict[str, float] = {}

    def timed(name: str, fn, **extra) -> float:  # each engine's CUDA allocator peak over its timed runs
        reset_peak_memory(dev)
        dt = fn(**extra)
        peaks[name] = max(peaks.get(name, 0.0), peak_memory_gb(dev))
        return dt

    for _ in range(repeats):
        covey_t.append(timed("covey", run_covey))
        hf_t.append(timed("hf", run_hf))
        if static:
            static_t.append(timed("hf_static", run_hf, cache_implementation="static"))
    c_med, h_med = statistics.median(covey_t), statistics.median(hf_t)
    gen_tokens = batch * new_tokens
    flops = _flops(hf_model, batch, prompt_tokens, new_tokens)
    peak = BF16_PEAK_FLOPS if dtype == "bf16" else FP32_PEAK_FLOPS
    result = {
        "model": model,
        "params": sum(p.numel() for p in hf_model.parameters()),
        "batch": batch,
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "dtype": dtype,
        "device": str(dev),
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "covey_tok_s": round(gen_tokens / c_med, 1),
        "hf_tok_s": round(gen_tokens / h_med, 1),
        "ratio": round(h_med / c_med, 2),
        "ratio_per_repeat": [round(h / c, 2) for c, h in zip(covey_t, hf_t)],
        "covey_s": [float(f"{x:.4g}") for x in covey_t],
        "hf_s": [float(f"{x:.4g}") for x in hf_t],
        "achieved_tflops": float(f"{flops / c_med / 1e12:.3g}"),
    }
    if static:
        s_med = statistics.median(static_t)
        result.update(hf_static_tok_s=round(gen_tokens / s_med, 1), ratio_vs_hf_static=round(s_med / c_med, 2),
                      hf_static_s=[float(f"{x:.4g}") for x in static_t])  # fmt: skip
    if dev.type == "cuda":
        result.update({f"{k}_peak_gb": round(v, 3) for k, v in peaks.items()})
    if dev.type == "cpu":
        result["ceiling_fraction"] = float(f"{flops / c_med / peak:.3g}")
    return result


def bench_generate_dtypes(model: str = "tiny-llama", dtypes: tuple[str, ...] = PAIR_DTYPES, **kw) -> dict:
    """`bench_generate` once per dtype (each a covey-vs-HF pair in that dtype), one after the other.

    Returns {dtype: that pair's result, ..., "ratio_best": covey's best tok/s over HF's best,
    "best_dtypes": {"covey": ..., "hf": ...}}: which dtype is faster depends on the CPU
    (`covey.dtypes`), so each engine is taken at its faster one.
    """
    dtypes = check_pair_dtypes(dtypes)
    out: dict = {d: bench_generate(model, dtype=d, **kw) for d in dtypes}
    covey = max(dtypes, key=lambda d: out[d]["covey_tok_s"])
    hf = max(dtypes, key=lambda d: out[d]["hf_tok_s"])
    out["ratio_best"] = round(out[covey]["covey_tok_s"] / out[hf]["hf_tok_s"], 2)
    out["best_dtypes"] = {"covey": covey, "hf": hf}
    return out


def generate_cmd(
    model: str = "tiny-llama",
    batch: int = 64,
    prompt_tokens: int = 32,
    new_tokens: int = 64,
    dtype: str = "bf16",
    repeats: int = 3,
    threads: int = 0,
    device: str = "auto",
    hf_static: str = "auto",
) -> None:
    """Benchmark covey's generation against HF generate; print one JSON line.
    dtype "both": a bf16 pair and an fp32 pair (`bench_generate_dtypes`)."""
    kw = dict(batch=batch, prompt_tokens=prompt_tokens, new_tokens=new_tokens, repeats=repeats, threads=threads,
              device=device, hf_static=hf_static)  # fmt: skip
    if dtype not in ("bf16", "fp32", "auto", "both"):
        raise ValueError(f"dtype must be 'bf16', 'fp32', 'auto' or 'both', got {dtype!r}")
    if dtype == "both":
        print(json.dumps(bench_generate_dtypes(model, PAIR_DTYPES, **kw)))
    else:
        print(json.dumps(bench_generate(model, dtype=dtype, **kw)))


if __name__ == "__main__":
    import sys

    args = dict(a.split("=", 1) for a in sys.argv[1:])
    ints = {"batch", "prompt_tokens", "new_tokens", "repeats", "threads"}
    generate_cmd(**{k: int(v) if k in ints else v for k, v in args.items()})
