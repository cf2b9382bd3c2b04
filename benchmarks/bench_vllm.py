"""The vllm engine on the settings of `bench_generate.py`; prints one JSON line.

Same random-token prompts as `covey bench generate` (same seed), temperature 1, no truncation,
exactly `new_tokens` per row (EOS ignored). Reports: vLLM's start time (`load_s`: LLM() on the
saved folder), generation tok/s (median of `repeats` after one warm-up), the weight-sync time per
call (`load_weights` of the full model, in place; median of 5), and the log-prob mismatch of one
generated batch against covey's learner (fp32 teacher forcing, `completion_logprobs`), with the load
average before and after. Run in the vLLM environment (`make test-vllm` builds .venv-vllm):

    .venv-vllm/bin/python benchmarks/bench_vllm.py --model smollm2-135m-instruct --threads 1
"""

import argparse
import json
import os
import statistics
import time

import torch

from covey.engine import SamplingParams
from covey.engine.vllm_engine import VllmEngine
from covey.learner.logprobs import completion_logprobs
from covey.models import load


def main(model: str, batch: int, prompt_tokens: int, new_tokens: int, dtype: str, threads: int, repeats: int, seed: int = 0):
    torch.set_num_threads(threads)
    load_before = os.getloadavg()[0]
    hf_model, tok = load(model)
    engine = VllmEngine(hf_model, tok, dtype=dtype, cpu_threads=threads, kv_cache_gib=4.0, max_model_len=1024)
    gen = torch.Generator().manual_seed(seed)
    low = 5 if hf_model.config.vocab_size > 10 else 0
    prompts = torch.randint(low, hf_model.config.vocab_size, (batch, prompt_tokens), generator=gen)
    sp = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=seed, ignore_eos=True)
    out = engine.generate(list(prompts), 1, sp)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = engine.generate(list(prompts), 1, sp)
        times.append(time.perf_counter() - t0)
        assert out.completion_ids.shape == (batch, new_tokens)
    for _ in range(5):
        engine.load_weights(hf_model)
    with torch.no_grad():
        ref, _ = completion_logprobs(hf_model, out.prompt_ids, out.completion_ids, out.completion_mask)
    diff = (out.logprobs - ref).abs()[out.completion_mask == 1]
    result = {
        "engine": "vllm", "model": model, "batch": batch, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
        "dtype": dtype, "threads": threads, "vllm_tok_s": round(batch * new_tokens / statistics.median(times), 1),
        "vllm_s": [round(t, 3) for t in times], "load_s": round(engine.load_seconds, 1),
        "sync_s": round(statistics.median(engine.sync_seconds), 3), "sync_s_all": [round(t, 3) for t in engine.sync_seconds],
        "logprob_abs_diff_vs_fp32_learner": {"mean": float(f"{diff.mean():.3g}"), "max": float(f"{diff.max():.3g}")},
        "load_avg": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }  # fmt: skip
    engine.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "auto"])
    ap.add_argument("--threads", type=int, default=1, help="vLLM's OpenMP threads, bound to cores 0..n-1")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    main(a.model, a.batch, a.prompt_tokens, a.new_tokens, a.dtype, a.threads, a.repeats)
