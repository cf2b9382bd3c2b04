"""Sandbox throughput: programs per second through bubblewrap, alone and via the reward runner.

Three measurements, each printed as one line:
  run        `covey.rewards.sandbox.run("print(1)")`, sequential, in this process
  mbpp       MBPP reference solutions (all asserts of each problem in one sandbox) scored by the "code"
             reward in a RewardRunner with --workers processes; also checks that they pass
  humaneval  HumanEval canonical solutions, same way

    .venv/bin/python benchmarks/bench_sandbox.py --n 200 --workers 2
"""

from __future__ import annotations

import argparse
import time

from covey.rewards import RewardRunner
from covey.rewards.sandbox import run, sandbox_status
from covey.tasks import get_task


def bench_run(n: int) -> float:
    run("print(1)")  # warm: probe + page cache
    start = time.perf_counter()
    for _ in range(n):
        assert run("print(1)").stdout == "1\n"
    return n / (time.perf_counter() - start)


def bench_task(task_name: str, split: str, n: int, workers: int) -> tuple[float, float, int]:
    task = get_task(task_name, chat=False)
    items = task.examples(split)[:n]
    completions = ["```python\n" + it["answer"] + "\n```" for it in items]
    with RewardRunner([{"name": "code", "params": {"mode": "binary"}, "timeout_s": 600}], workers=workers) as runner:
        runner(["p"], [completions[0]], tests=[items[0]["tests"]])  # start the workers
        start = time.perf_counter()
        batch = runner([it["prompt"] for it in items], completions, tests=[it["tests"] for it in items])
        elapsed = time.perf_counter() - start
    return len(items) / elapsed, batch.rewards[:, 0].mean().item(), len(items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="programs per measurement")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    ok, reason = sandbox_status()
    print(f"sandbox: {reason if ok else 'UNAVAILABLE: ' + reason}")
    print(f"run        sequential           {bench_run(args.n):7.1f} programs/s")
    for name, split in (("mbpp", "test"), ("humaneval", "test")):
        rate, passed, n = bench_task(name, split, args.n, args.workers)
        print(f"{name:<10} {args.workers} workers, {n:4d} progs {rate:7.1f} programs/s   reference pass rate {passed:.3f}")


if __name__ == "__main__":
    main()
