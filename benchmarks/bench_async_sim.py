"""Where the overlap gain of `runtime.executor: thread` comes from: a simulated clock, fake engines.

No model runs. A generator and a learner share a clock; the generator makes step batches (batch k
takes `gen[k]` seconds alone), the learner trains them in order (`learn` seconds alone, weight copy
included). Admission is covey's own `StalenessGate` (AReaL's formula): batch k starts only when
k - (published version) <= eta. While both work at once each runs at 1/`contention` of its speed
(1: separate devices, e.g. an inference GPU and a training GPU; 2: one CPU whose cores either of
them saturates alone). Processor sharing is integrated in small time steps `dt`.

    python benchmarks/bench_async_sim.py            # the table of docs/runtime.md

Synchronous time per step is gen + learn. With overlap the steady state is max(gen, learn): the
gain is at most (gen + learn) / max(gen, learn) <= 2x, reached when the two are equal, and only
without contention; eta > 1 only helps when generation times vary (it absorbs a slow batch).
"""

from __future__ import annotations

import argparse
import json
import random

from covey.runtime.staleness import StalenessGate


def simulate(gen: list[float], learn: float, eta: int | None, contention: float = 1.0, dt: float = 1e-3) -> dict:
    """Wall time to train len(gen) steps. eta None: synchronous (inline)."""
    n = len(gen)
    if eta is None:
        return {"time": sum(gen) + n * learn, "max_staleness": 0}
    gate, version, t = StalenessGate(eta), 0, 0.0
    gen_k, gen_left, gen_version = 0, 0.0, 0  # batch being generated, work left, its version
    ready: list[tuple[int, int]] = []  # (k, behaviour version)
    learn_left, learning = 0.0, None
    lags = []
    while version < n:
        if gen_left <= 0 and gen_k < n and gate.admit(version):  # start the next batch
            gen_left, gen_version = gen[gen_k], version
        if learning is None and ready:  # start training the next batch
            learning = ready.pop(0)
            learn_left = learn
            lags.append(learning[0] - learning[1])
        both = gen_left > 0 and learning is not None
        rate = 1.0 / contention if both else 1.0
        t += dt
        if gen_left > 0:
            gen_left -= dt * rate
            if gen_left <= 0:
                ready.append((gen_k, gen_version))
                gate.finish()
                gen_k += 1
        if learning is not None:
            learn_left -= dt * rate
            if learn_left <= 0:
                learning, version = None, version + 1  # publish
    return {"time": t, "max_staleness": max(lags)}


def scenarios(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    tail = [min(8.0, rng.lognormvariate(-0.5, 1.0)) for _ in range(n)]  # mean ~1, a long tail
    mean_tail = sum(tail) / n
    rows = []
    for name, gen, learn, contention in [
        ("gen 1 s, learn 1 s, separate devices", [1.0] * n, 1.0, 1.0),
        ("gen 3 s, learn 1 s, separate devices", [3.0] * n, 1.0, 1.0),
        (f"gen long-tailed (mean {mean_tail:.2f} s), learn 1 s, separate devices", tail, 1.0, 1.0),
        ("gen 1 s, learn 1 s, one shared CPU (contention 2)", [1.0] * n, 1.0, 2.0),
        ("gen 1 s, learn 1 s, partly shared (contention 1.5)", [1.0] * n, 1.0, 1.5),
    ]:
        sync = simulate(gen, learn, None)["time"]
        for eta in (0, 1, 2, 4):
            r = simulate(gen, learn, eta, contention)
            rows.append({"scenario": name, "eta": eta, "s_per_step": round(r["time"] / n, 3),
                         "speedup_vs_sync": round(sync / r["time"], 3), "max_staleness": r["max_staleness"]})  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON line per row instead of a table")
    args = ap.parse_args()
    rows = scenarios(args.steps, args.seed)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print("| scenario | eta | s/step | speed-up vs sync | max staleness |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['scenario']} | {r['eta']} | {r['s_per_step']} | {r['speedup_vs_sync']}x | {r['max_staleness']} |")


if __name__ == "__main__":
    main()
