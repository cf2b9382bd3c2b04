"""The fsdp2 learner's device path in one process (benchmarks/gpu/run.sh part `fsdp2`).

A world of one rank (NCCL on CUDA, gloo on the CPU) shards MODEL with covey's `shard_model` (on CUDA:
bf16 gathers, fp32 reduction), builds covey's AdamW on the shards and runs `ShardedLearner.update`
on a random batch (P prompts x G completions x NEW tokens, ppo_clip / token-mean, advantages +-1),
timed per update after a warm-up (OFFLOAD=1: the shards and the AdamW state in CPU memory,
`runtime.fsdp_offload`). The same updates with the plain `Learner` on a fresh copy give the
baseline in the same process. Then the bucketed full-weight gather (`full_state_buckets`) and a
sharded checkpoint round trip (`covey.runtime.dcp`) are timed. One JSON line to stdout.

    python benchmarks/gpu/fsdp2_smoke.py MODEL DEVICE [PROMPTS GROUP NEW STEPS]
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist


def _timed(learner, batch, steps: int, dev: torch.device) -> tuple[list[float], dict]:
    from covey.learner.learner import peak_memory_gb, reset_peak_memory

    times, metrics = [], {}
    for i in range(steps + 1):  # the first is a warm-up
        if dev.type == "cuda":
            torch.cuda.synchronize()
        reset_peak_memory(dev)
        t0 = time.perf_counter()
        metrics = learner.update(copy.copy(batch), torch.Generator().manual_seed(i))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append(round(time.perf_counter() - t0, 4))
        metrics["peak_gb"] = round(peak_memory_gb(dev), 3)
    return times, metrics


def main(model_name: str, device: str, prompts: int = 8, group: int = 8, new: int = 256, steps: int = 3) -> dict:
    from covey.algos.presets import resolve_algo
    from covey.bench.batch import random_rollouts
    from covey.learner.learner import Learner
    from covey.models import load
    from covey.runtime.dcp import load_shards, save_shards
    from covey.runtime.sharded import ShardedLearner, full_state_buckets, local_bytes, shard_model
    from covey.train.config import OptimConfig
    from covey.learner.optim import build_optimizer

    dev = torch.device(device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    offload = os.environ.get("OFFLOAD") == "1"  # runtime.fsdp_offload: shards and AdamW state in CPU memory
    backend = ("cpu:gloo,cuda:nccl" if offload else "nccl") if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dtype = "bf16" if dev.type == "cuda" else "fp32"
    base, _ = load(model_name)
    base = base.float()
    batch = random_rollouts(base.config.vocab_size, prompts, group, new)
    algo = resolve_algo({"preset": "dapo"})
    kw = dict(algo=algo, temperature=1.0, max_new_tokens=new, dtype=dtype, micro_batch_size=16, grad_clip=1.0)

    plain = copy.deepcopy(base).to(dev)
    opt, sched = build_optimizer(plain, OptimConfig(lr=1e-6), steps + 1)
    plain_s, plain_m = _timed(Learner(plain, opt, sched, share_prompts=False, **kw), batch, steps, dev)
    del plain, opt, sched
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    model = copy.deepcopy(base).to(dev)
    root = shard_model(model, bf16=dtype == "bf16", offload=offload)
    opt, sched = build_optimizer(model, OptimConfig(lr=1e-6), steps + 1)
    learner = ShardedLearner(root, model, opt, sched, **kw)
    fsdp_s, fsdp_m = _timed(learner, batch, steps, dev)
    t0 = time.perf_counter()
    named = ((n, p) for n, p in model.named_parameters() if p.requires_grad)
    gathered = sum(len(b) for b in full_state_buckets(named, 64 << 20, keep=True))
    gather_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        save_shards(model, opt, f"{d}/learner")
        save_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        load_shards(model, opt, f"{d}/learner")
        load_s = time.perf_counter() - t0
    dist.destroy_process_group()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {
        "bench": "fsdp2-smoke", "model": model_name, "device": str(dev), "offload": offload,
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None, "torch": torch.__version__,
        "shape": {"prompts": prompts, "group": group, "new_tokens": new, "micro_batch": 16, "dtype": dtype},
        "plain_s_per_update": plain_s, "fsdp2_s_per_update": fsdp_s, "ratio_fsdp2_over_plain": round(med(fsdp_s) / med(plain_s), 3),
        "plain_peak_gb": plain_m["peak_gb"], "fsdp2_peak_gb": fsdp_m["peak_gb"],
        "loss": {"plain": plain_m["learn/loss"], "fsdp2": fsdp_m["learn/loss"]},
        "grad_norm": {"plain": plain_m["learn/grad_norm"], "fsdp2": fsdp_m["learn/grad_norm"]},
        "local_bytes": local_bytes(model, opt), "gathered_tensors": gathered, "gather_s": round(gather_s, 3),
        "dcp_save_s": round(save_s, 3), "dcp_load_s": round(load_s, 3),
    }  # fmt: skip


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main(args[0], args[1], *map(int, args[2:]))))
