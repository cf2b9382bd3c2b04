"""The vllm engine with a LoRA policy: adapter-only sync against merged-weights sync; prints one JSON line.

One PEFT LoRA policy (every linear layer, rank `--rank`, alpha 2 * rank, random B as after training)
served twice, one engine after the other: `lora_sync: adapter` (vLLM holds the base weights with
`enable_lora`; a sync writes the adapter with peft `save_pretrained` and loads it with `add_lora`)
and `merged` (a sync computes W + s*B@A with `covey.train.setup.engine_state` and reloads every
weight in place). Reports per engine: the sync time as the trainer pays it (median of `syncs`, the
adapter changed before each; for merged, `engine_state` + `load_weights`, and `load_weights` alone),
the bytes one sync moves, and generation tok/s (random-token prompts, temperature 1, EOS ignored;
median of `repeats` after a warm-up), with the load average before and after. Run in the vLLM
environment (`make test-vllm` builds .venv-vllm):

    .venv-vllm/bin/python benchmarks/bench_vllm_lora.py --model smollm2-135m-instruct --threads 1
"""

import argparse
import json
import os
import statistics
import time

import torch

from covey.engine import SamplingParams
from covey.engine.vllm_engine import VllmEngine
from covey.models import load
from covey.models.state import engine_model, engine_state


def _randomise_b(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def _tok_s(engine, prompts, sp, repeats):
    engine.generate(prompts, 1, sp)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        engine.generate(prompts, 1, sp)
        times.append(time.perf_counter() - t0)
    return round(len(prompts) * sp.max_new_tokens / statistics.median(times), 1)


def main(model: str, rank: int, batch: int, prompt_tokens: int, new_tokens: int, dtype: str, threads: int, syncs: int,
         repeats: int, seed: int = 0):  # fmt: skip
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(threads)
    load_before = os.getloadavg()[0]
    base, tok = load(model)
    policy = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    gen = torch.Generator().manual_seed(seed)
    _randomise_b(policy, gen)
    low = 5 if base.config.vocab_size > 10 else 0
    prompts = list(torch.randint(low, base.config.vocab_size, (batch, prompt_tokens), generator=gen))
    sp = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=seed, ignore_eos=True)
    common = dict(dtype=dtype, cpu_threads=threads, kv_cache_gib=2, max_model_len=512)
    result = {"model": model, "rank": rank, "dtype": dtype, "threads": threads, "batch": batch,
              "prompt_tokens": prompt_tokens, "new_tokens": new_tokens}  # fmt: skip

    engine = VllmEngine(policy, tok, lora_sync="adapter", **common)
    result["adapter_load_s"] = round(engine.load_seconds, 1)
    result["adapter_tok_s"] = _tok_s(engine, prompts, sp, repeats)
    for _ in range(syncs):
        _randomise_b(policy, gen)
        engine.load_weights(policy)
    folder = engine.lora_request.lora_path
    result["adapter_sync_bytes"] = os.path.getsize(os.path.join(folder, "adapter_model.safetensors"))
    result["adapter_sync_s"] = round(statistics.median(engine.sync_seconds), 3)
    result["adapter_sync_s_all"] = [round(t, 3) for t in engine.sync_seconds]
    engine.close()

    engine = VllmEngine(engine_model(policy), tok, **common)
    result["merged_load_s"] = round(engine.load_seconds, 1)
    result["merged_tok_s"] = _tok_s(engine, prompts, sp, repeats)
    paid = []
    for _ in range(syncs):
        _randomise_b(policy, gen)
        t0 = time.perf_counter()
        state = engine_state(policy)
        engine.load_weights(state)
        paid.append(time.perf_counter() - t0)
    result["merged_sync_bytes"] = sum(v.numel() * v.element_size() for v in state.values())
    result["merged_sync_s"] = round(statistics.median(paid), 3)  # engine_state (the merge) + load_weights
    result["merged_load_weights_s"] = round(statistics.median(engine.sync_seconds), 3)
    result["merged_sync_s_all"] = [round(t, 3) for t in paid]
    engine.close()
    result["load_avg"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank (covey's default model.lora.r)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "auto"])
    ap.add_argument("--threads", type=int, default=1, help="vLLM's OpenMP threads, bound to cores 0..n-1")
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    main(a.model, a.rank, a.batch, a.prompt_tokens, a.new_tokens, a.dtype, a.threads, a.syncs, a.repeats)
