"""fsdp2 against ddp: 2 gloo ranks on the CPU, seconds per update and bytes per rank (issue 33).

Both learners run in the same two processes, in turns (ddp, fsdp2, ddp, fsdp2, ...), on the same batch
(P prompts x G completions x T tokens, random tokens, advantages +-1, dapo / token-mean, micro-batch M),
each on its own copy of the model with its own AdamW; the first update of each is a warm-up. Reported
per learner: the median seconds per update over the timed ones, and rank 0's bytes of parameters,
gradients and AdamW state (local shards), and the ratio fsdp2 / ddp. One JSON line to stdout.

    python benchmarks/bench_sharded.py [--model smollm2-135m-instruct] [--updates 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time

import torch
import torch.multiprocessing as mp


def _rank(rank: int, world: int, init: str, out: str, args) -> None:
    torch.set_num_threads(args.threads)
    from covey.algos.presets import resolve_algo
    from covey.bench.batch import random_rollouts
    from covey.learner.optim import build_optimizer
    from covey.models import load
    from covey.runtime.data_parallel import DataParallelLearner, init_group
    from covey.runtime.sharded import ShardedLearner, local_bytes, shard_model
    from covey.train.config import OptimConfig

    init_group(rank, world, init, backend="gloo")
    base, _ = load(args.model)
    base = base.float()
    batch = random_rollouts(base.config.vocab_size, args.prompts, args.group, args.tokens, prompt_tokens=24)
    kw = dict(algo=resolve_algo({"preset": "dapo"}), temperature=1.0, max_new_tokens=args.tokens, dtype="fp32",
              micro_batch_size=args.micro, grad_clip=1.0)  # fmt: skip
    ddp_model = copy.deepcopy(base)
    opt, sched = build_optimizer(ddp_model, OptimConfig(lr=1e-6), args.updates + 1)
    ddp = DataParallelLearner(ddp_model, opt, sched, share_prompts=False, **kw)  # the same forward as fsdp2's
    fsdp_model = copy.deepcopy(base)
    root = shard_model(fsdp_model, bf16=False)
    opt2, sched2 = build_optimizer(fsdp_model, OptimConfig(lr=1e-6), args.updates + 1)
    fsdp = ShardedLearner(root, fsdp_model, opt2, sched2, **kw)
    del base
    times: dict[str, list[float]] = {"ddp": [], "fsdp2": []}
    for i in range(args.updates + 1):
        for name, learner in (("ddp", ddp), ("fsdp2", fsdp)):
            torch.distributed.barrier()
            t0 = time.perf_counter()
            learner.update(copy.copy(batch), torch.Generator().manual_seed(i))
            torch.distributed.barrier()
            if i:
                times[name].append(time.perf_counter() - t0)
    result = {"times": times, "bytes": {"ddp": local_bytes(ddp_model, opt), "fsdp2": local_bytes(fsdp_model, opt2)}}
    torch.save(result, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--updates", type=int, default=4)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--micro", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    load = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(2, f"file://{tmp}/rendezvous", tmp, args), nprocs=2, join=True)
        r0 = torch.load(f"{tmp}/rank0.pt", weights_only=False)
    med = {k: statistics.median(v) for k, v in r0["times"].items()}
    b = r0["bytes"]
    from covey.bench.trl import _cpu_name

    print(json.dumps({
        "bench": "fsdp2-vs-ddp", "model": args.model, "ranks": 2, "backend": "gloo", "threads_per_rank": args.threads,
        "machine": _cpu_name(), "load_avg_before_after": [load, round(os.getloadavg()[0], 2)],
        "shape": {"prompts": args.prompts, "group": args.group, "tokens": args.tokens, "micro_batch": args.micro},
        "s_per_update": {k: [round(x, 3) for x in v] for k, v in r0["times"].items()},
        "median_s": {k: round(v, 3) for k, v in med.items()}, "ratio_fsdp2_over_ddp": round(med["fsdp2"] / med["ddp"], 3),
        "rank0_bytes": b, "bytes_ratio": {k: round(b["fsdp2"][k] / b["ddp"][k], 3) for k in b["ddp"] if b["ddp"][k]},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
