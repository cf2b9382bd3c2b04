"""Throughput of `runtime.executor: inline` vs `thread` (and `ray` where installed) on a real model.

Trains the same config under each executor in one process, alternating the executors round by
round so they see the same machine load, and prints one JSON line per run plus a summary: seconds
per step (the first step, warm-up, excluded), generation and learning time per step, the time the
learner waited for a batch, and the machine (CPU model, torch threads, load average before and
after). On a small CPU both stages compete for the same cores, so no speed-up is expected there:
the simulated clock (`bench_async_sim.py`) shows where the gain comes from.

    python benchmarks/bench_async_thread.py --model tiny-llama --steps 6 --rounds 2

Where Ray is installed, `ray` with max_staleness 0 and 1 (one engine actor) and with 2 engine
actors at max_staleness 1 (`ray2`) is measured too, on one local Ray (`ray.init(num_cpus=2)`,
started once: its start-up is not in the numbers). `--runs ray/eta=1,ray2/eta=1` keeps only some.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from covey.train.config import load_config
from covey.train.trainer import Trainer


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def run(executor: str, eta: int, args, root: Path, workers: int = 1) -> dict:
    overrides = [
        f"model.name={args.model}", "task.name=arithmetic", "task.params={digits: 1, n_train: 128, n_test: 16}",
        f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
        f"sampling.max_new_tokens={args.new_tokens}", "reward_workers=0", "log.progress=false",
        "log.report_to=[jsonl]", "algo.kl=null", f"steps={args.steps}", f"threads={args.threads}",
        f"runtime.executor={executor}", f"runtime.max_staleness={eta}", f"log.dir={root}",
    ] + ([f"runtime.engine_workers={workers}"] if executor == "ray" else [])  # fmt: skip
    cfg = load_config(None, overrides)
    trainer = Trainer(cfg, root / f"{executor}-{eta}-{time.time_ns()}")
    rows, stamps = [], [time.perf_counter()]
    try:
        for _ in range(cfg.steps):
            rows.append(trainer.step())
            stamps.append(time.perf_counter())
    finally:
        trainer.close()
    steady = [b - a for a, b in zip(stamps[1:], stamps[2:])]  # step 1 (warm-up) excluded
    tail = rows[1:]
    return {
        "executor": executor, "engine_workers": workers, "max_staleness": eta, "s_per_step": statistics.mean(steady),
        "generate_s": statistics.mean(m["time/generate"] for m in tail),
        "learn_s": statistics.mean(m["time/learn"] for m in tail),
        "learner_wait_s": statistics.mean(m.get("time/learner_wait", float("nan")) for m in tail),
        "staleness_mean": statistics.mean(m.get("async/staleness", 0.0) for m in tail),
        "reward_mean": statistics.mean(m["reward/mean"] for m in rows),
    }  # fmt: skip


def _key(executor: str, eta: int, workers: int) -> str:
    return f"{executor}{workers if workers > 1 else ''}/eta={eta}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    ap.add_argument("--runs", default="", help="comma list of <executor>/eta=<n> to keep (ray2: 2 engine actors); inline/eta=0 always runs")
    args = ap.parse_args()
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": args.threads or torch.get_num_threads(),
               "load_avg_before": os.getloadavg()}  # fmt: skip
    results: dict[str, list[dict]] = {}
    runs = [("inline", 0, 1), ("thread", 0, 1), ("thread", 1, 1)]
    try:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        runs += [("ray", 0, 1), ("ray", 1, 1), ("ray", 1, 2)]
    except ImportError:
        ray = None
    if args.runs:
        keep = set(args.runs.split(",")) | {"inline/eta=0"}
        runs = [r for r in runs if _key(*r) in keep]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for executor, eta, workers in runs:
                row = run(executor, eta, args, Path(tmp), workers)
                row["round"] = r
                print(json.dumps(row), flush=True)
                results.setdefault(_key(executor, eta, workers), []).append(row)
    if ray is not None:
        ray.shutdown()
    machine["load_avg_after"] = os.getloadavg()
    base = statistics.median(x["s_per_step"] for x in results["inline/eta=0"])
    summary = {k: {"s_per_step_median": statistics.median(x["s_per_step"] for x in v),
                   "speedup_vs_inline": base / statistics.median(x["s_per_step"] for x in v)} for k, v in results.items()}  # fmt: skip
    print(json.dumps({"machine": machine, "settings": vars(args), "summary": summary}))


if __name__ == "__main__":
    main()
