"""Low-precision rollouts (Sol-RL style): covey's torch engine with int8 decoder linears against fp32
and bf16 on the settings of `bench_generate.py`; prints one JSON line per engine setting.

Same random-token prompts as `covey bench generate` (same seed), temperature 1, no truncation,
exactly `new_tokens` per row (EOS ignored). Per setting: generation tok/s (median of `repeats` after
one warm-up), the time of one `load_weights` (the re-quantization at every sync; median of 3) and
the behaviour log-prob mismatch of one generated batch against the full-precision learner (fp32
teacher forcing, `completion_logprobs`): mean and max |engine - learner| over tokens, with the load
average before and after.

    .venv/bin/python benchmarks/bench_quantize.py --model smollm2-135m-instruct --threads 1
"""

import argparse
import json
import os
import statistics
import time

import torch

from covey.engine import SamplingParams, TorchEngine
from covey.learner.logprobs import completion_logprobs
from covey.models import load

SETTINGS = {"fp32": ("fp32", None), "bf16": ("bf16", None), "int8": ("fp32", "int8"), "int8_bf16": ("bf16", "int8")}


def main(model: str, batch: int, prompt_tokens: int, new_tokens: int, threads: int, repeats: int, only: list[str], seed: int = 0):
    torch.set_num_threads(threads)
    hf_model, tok = load(model)
    hf_model = hf_model.float().eval()
    gen = torch.Generator().manual_seed(seed)
    low = 5 if hf_model.config.vocab_size > 10 else 0
    prompts = list(torch.randint(low, hf_model.config.vocab_size, (batch, prompt_tokens), generator=gen))
    sp = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=seed, ignore_eos=True)
    for name in only:
        dtype, quantize = SETTINGS[name]
        load_before = os.getloadavg()[0]
        engine = TorchEngine(hf_model, dtype=dtype, tokenizer=tok, quantize=quantize)
        out = engine.generate(prompts, 1, sp)  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = engine.generate(prompts, 1, sp)
            times.append(time.perf_counter() - t0)
        syncs = []
        for _ in range(3):
            t0 = time.perf_counter()
            engine.load_weights(hf_model)
            syncs.append(time.perf_counter() - t0)
        with torch.no_grad():
            ref, _ = completion_logprobs(hf_model, out.prompt_ids, out.completion_ids, out.completion_mask)
        diff = (out.logprobs - ref).abs()[out.completion_mask == 1]
        print(json.dumps({
            "engine": f"torch {name}", "model": model, "batch": batch, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
            "threads": threads, "tok_s": round(batch * new_tokens / statistics.median(times), 1), "gen_s": [round(t, 2) for t in times],
            "sync_s": round(statistics.median(syncs), 3),
            "logprob_abs_diff_vs_fp32_learner": {"mean": float(f"{diff.mean():.3g}"), "max": float(f"{diff.max():.3g}")},
            "load_avg": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default=",".join(SETTINGS), help=f"comma list of {', '.join(SETTINGS)}")
    a = ap.parse_args()
    main(a.model, a.batch, a.prompt_tokens, a.new_tokens, a.threads, a.repeats, a.only.split(","))
