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
`hf_static_tok_s` and `ratio_vs_hf_static` (against covey's median). These runs come after the
others, in a process of their own with the device to themselves, under `hf_static_budget_s`
(warm-up included): a compilation that overruns is stopped and the result says
`"hf_static": "skipped: ..."` instead of figures, so the covey and HF dynamic-cache figures
always come back.

Progress: each phase (load, warm-ups, each timed repeat, the static process) is logged to stderr
with its time, so a run stopped from outside shows where it was; stdout carries only the result. dtype: bf16, fp32, or auto (`covey.dtypes`; the
result names the dtype chosen); `bench_generate_dtypes` (CLI `--dtype both`) runs a pair per dtype
and compares each engine at its faster one (on one 2-core AVX512-BF16 CPU bf16 matmuls ran at ~2x
fp32, on another at ~0.7x).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
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
    hf_static_budget_s: float = 120.0,
) -> dict:
    """Time covey's engine and HF generate on `model` (an alias or path); return one result dict.

    threads: torch intra-op threads for both (0: leave torch's default). On a shared, oversubscribed
    machine 1 thread can beat 2 by a wide margin (OpenMP threads wait on each other).
    hf_static_budget_s: wall-clock limit of the HF static-cache runs (their own process, warm-up
    included); past it they are skipped and the result says so (`hf_static`).
    """
    if dtype not in ("bf16", "fp32", "auto"):
        raise ValueError(f"dtype must be 'bf16', 'fp32' or 'auto', got {dtype!r}")
    if hf_static not in ("auto", "yes", "no"):
        raise ValueError(f"hf_static must be 'auto', 'yes' or 'no', got {hf_static!r}")
    if min(batch, prompt_tokens, new_tokens, repeats) < 1:
        raise ValueError("batch, prompt_tokens, new_tokens and repeats must all be >= 1")
    if not hf_static_budget_s > 0:
        raise ValueError(f"hf_static_budget_s must be > 0 seconds, got {hf_static_budget_s}")
    spec = dict(model=model, batch=batch, prompt_tokens=prompt_tokens, new_tokens=new_tokens, dtype=dtype,
                repeats=repeats, seed=seed, threads=threads, device=device)  # fmt: skip
    hf_model, tok, dev, dtype, prompts = _setup(**spec)
    engine = TorchEngine(hf_model, dtype=dtype, tokenizer=tok)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=seed, ignore_eos=True)

    def run_covey() -> float:
        _sync(dev)
        t0 = time.perf_counter()
        out = engine.generate(list(prompts), 1, sampling)  # returns CPU tensors: already waited for
        dt = time.perf_counter() - t0
        assert out.completion_ids.shape == (batch, new_tokens)
        return dt

    run_hf = _hf_runner(hf_model, tok, prompts.to(dev), new_tokens, dev)
    static = hf_static == "yes" or (hf_static == "auto" and dev.type == "cuda")
    # warm-up: allocator, thread pool, oneDNN kernels
    _timed_phase("covey warm-up", run_covey)
    _timed_phase("HF warm-up (dynamic cache)", run_hf)
    covey_t, hf_t = [], []
    peaks: dict[str, float] = {}

    def timed(name: str, fn) -> float:  # each engine's CUDA allocator peak over its timed runs
        reset_peak_memory(dev)
        dt = fn()
        peaks[name] = max(peaks.get(name, 0.0), peak_memory_gb(dev))
        return dt

    for r in range(repeats):
        covey_t.append(timed("covey", run_covey))
        hf_t.append(timed("hf", run_hf))
        _log(f"repeat {r + 1}/{repeats}: covey {covey_t[-1]:.3g} s, HF {hf_t[-1]:.3g} s")
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
    if dev.type == "cuda":
        result.update({f"{k}_peak_gb": round(v, 3) for k, v in peaks.items()})
    if dev.type == "cpu":
        result["ceiling_fraction"] = float(f"{flops / c_med / peak:.3g}")
    if static:
        del engine, run_hf, hf_model  # the static runs get the device to themselves
        _free(dev)
        st = _hf_static_process({**spec, "dtype": dtype}, hf_static_budget_s)
        if "hf_static_s" in st:
            s_med = statistics.median(st["hf_static_s"])
            st.update(hf_static_tok_s=round(gen_tokens / s_med, 1), ratio_vs_hf_static=round(s_med / c_med, 2))
        result.update(st)
    return result


def _setup(model: str, batch: int, prompt_tokens: int, dtype: str, seed: int, threads: int, device: str, **_):
    """The model on its device in the benchmark's dtype, and the seeded random-token prompts [batch, P]
    (the same in every process for the same seed)."""
    from covey.models import load

    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    t0 = time.perf_counter()
    hf_model, tok = load(model)
    dtype = resolve_dtype_name(dtype, dev, hf_model.config.hidden_size)
    hf_model.to(dev, torch.bfloat16 if dtype == "bf16" else torch.float32)
    _sync(dev)
    _log(f"loaded {model} on {dev} in {dtype} ({time.perf_counter() - t0:.1f} s)")
    gen = torch.Generator().manual_seed(seed)
    low = 5 if hf_model.config.vocab_size > 10 else 0  # skip the special-token ids of the tiny vocab
    prompts = torch.randint(low, hf_model.config.vocab_size, (batch, prompt_tokens), generator=gen)
    return hf_model, tok, dev, dtype, prompts


def _hf_runner(hf_model, tok, prompts, new_tokens: int, dev: torch.device, **extra):
    """A function timing one HF `generate` call on `prompts` (on `dev`), `new_tokens` tokens per row."""
    kwargs = dict(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0, **extra,
    )  # fmt: skip

    def run() -> float:
        _sync(dev)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = hf_model.generate(prompts, attention_mask=torch.ones_like(prompts), **kwargs)
        _sync(dev)
        dt = time.perf_counter() - t0
        assert out.shape == (prompts.shape[0], prompts.shape[1] + new_tokens)
        return dt

    return run


def hf_static_times(**spec) -> dict:
    """HF `generate` with `cache_implementation="static"`: one warm-up (on CUDA transformers compiles
    the decode step in it) and `repeats` timed runs, on `bench_generate`'s model and prompts. Run in a
    process of its own by `bench_generate` (so a compilation that overruns can be stopped)."""
    hf_model, tok, dev, _, prompts = _setup(**spec)
    run = _hf_runner(hf_model, tok, prompts.to(dev), spec["new_tokens"], dev, cache_implementation="static")
    warm = _timed_phase("HF static warm-up" + (" (compiles the decode step)" if dev.type == "cuda" else ""), run)
    times, peak = [], 0.0
    for r in range(spec["repeats"]):
        reset_peak_memory(dev)
        times.append(run())
        peak = max(peak, peak_memory_gb(dev))
        _log(f"HF static repeat {r + 1}/{spec['repeats']}: {times[-1]:.3g} s")
    out = {"hf_static_s": [float(f"{x:.4g}") for x in times], "hf_static_warmup_s": round(warm, 2)}
    if dev.type == "cuda":
        out["hf_static_peak_gb"] = round(peak, 3)
    return out


def _hf_static_process(spec: dict, budget_s: float) -> dict:
    """`hf_static_times(**spec)` in a child process, stopped after `budget_s` seconds. Returns its
    figures, or {"hf_static": why there are none} (never a figure from a run that did not finish)."""
    import covey

    code = ("import json, sys; from covey.bench.generate import hf_static_times; "
            "print(json.dumps(hf_static_times(**json.loads(sys.argv[1]))))")  # fmt: skip
    src = os.path.dirname(os.path.dirname(covey.__file__))  # the child imports this covey
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    _log(f"HF static cache: its own process, budget {budget_s:g} s")
    t0 = time.perf_counter()
    try:  # the child's stderr (its phase log) goes to ours; its stdout is one JSON line
        done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], stdout=subprocess.PIPE, text=True,
                              env=env, timeout=budget_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        _log(f"HF static cache: stopped after {budget_s:g} s, no figures")
        return {"hf_static": f"skipped: not done within the {budget_s:g} s budget (hf_static_budget_s; on CUDA "
                             "its warm-up compiles the decode step)"}  # fmt: skip
    if done.returncode != 0:
        return {"hf_static": f"failed: the HF static process exited with {done.returncode} (its error is on stderr)"}
    _log(f"HF static cache: done in {time.perf_counter() - t0:.1f} s")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _timed_phase(name: str, fn) -> float:
    t0 = time.perf_counter()
    _log(f"{name} ...")
    fn()
    dt = time.perf_counter() - t0
    _log(f"{name}: {dt:.3g} s")
    return dt


def _log(msg: str) -> None:
    """A phase of the benchmark, to stderr with the time (stdout carries only the JSON result)."""
    print(f"[bench generate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _free(dev: torch.device) -> None:
    import gc

    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


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
    hf_static_budget_s: float = 120.0,
) -> None:
    """Benchmark covey's generation against HF generate; print one JSON line.
    dtype "both": a bf16 pair and an fp32 pair (`bench_generate_dtypes`)."""
    kw = dict(batch=batch, prompt_tokens=prompt_tokens, new_tokens=new_tokens, repeats=repeats, threads=threads,
              device=device, hf_static=hf_static, hf_static_budget_s=hf_static_budget_s)  # fmt: skip
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
    generate_cmd(**{k: int(v) if k in ints else float(v) if k == "hf_static_budget_s" else v for k, v in args.items()})
