"""What `runtime.interrupt_on_update` changes under `executor: thread`: a simulated clock, and a real run.

Simulated (default; no model runs). Time moves in decode steps. A batch is R rows with long-tailed
lengths; it costs `prefill` steps, then one step per token until its longest row ends. The learner
trains a batch in `learn` steps and then publishes a version; admission is covey's `StalenessGate`
(batch k starts when k - published <= eta); generator and learner on separate devices (no
contention). A version change costs `load` steps before the next tokens. Three policies for a
publish that comes while a batch is being generated:

    wait      no interruption (interrupt_on_update: false): the batch ends on its admission version
    carry     covey's: cut, load, re-prefill prompt + partial, continue (carried tokens kept)
    restart   cut, load, regenerate the cut rows from their prompts (the partial tokens are lost)

It reports seconds per step, the learner's wait per step, the token-lag histogram of the trained
tokens, and per step the tokens carried over an update, lost, and the decode steps spent.

    python benchmarks/bench_async_interrupt.py             # the table of docs/runtime.md
    python benchmarks/bench_async_interrupt.py --real      # tiny-llama, thread eta 1, interrupt on vs off
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from covey.runtime.staleness import StalenessGate


def simulate(lengths: list[list[int]], learn: int, eta: int, policy: str, prefill: int = 2, load: int = 1) -> dict:
    """Train len(lengths) steps (batch k's row lengths `lengths[k]`) under `policy`."""
    n = len(lengths)
    gate, version, t = StalenessGate(eta), 0, 0
    gen = None  # the batch in flight: k, admission version, per-row target / tokens (their versions), overhead, loaded
    ready: list[tuple[int, list[list[int]]]] = []
    learning, learn_left, trained = None, 0, 0
    lags: list[int] = []
    carried = lost = decode_steps = waited = 0
    while trained < n:
        if gen is None and len(ready) + (learning is not None) + trained < n and gate.admit(version):
            k = trained + len(ready) + (learning is not None)
            gen = {"k": k, "target": list(lengths[k]), "tok": [[] for _ in lengths[k]], "v": version,
                   "left": prefill + (load if version else 0)}  # fmt: skip
        if learning is None and ready:
            k, toks = ready.pop(0)
            lags += [k - v for row in toks for v in row]
            learning, learn_left = k, learn
        if learning is None:
            waited += 1
        t += 1
        if gen is not None:  # one step of the generator
            if gen["left"] > 0:
                gen["left"] -= 1
            else:
                decode_steps += 1
                for row, target in zip(gen["tok"], gen["target"]):
                    if len(row) < target:
                        row.append(gen["v"])
                if all(len(r) >= m for r, m in zip(gen["tok"], gen["target"])):
                    ready.append((gen["k"], gen["tok"]))
                    gate.finish()
                    gen = None
        if learning is not None:
            learn_left -= 1
            if learn_left == 0:
                learning, version, trained = None, version + 1, trained + 1
                if gen is not None and policy != "wait":  # the publish interrupts the batch in flight
                    alive = [i for i, (r, m) in enumerate(zip(gen["tok"], gen["target"])) if len(r) < m]
                    if alive:
                        gen["v"] = version
                        gen["left"] += load + prefill  # load the weights, prefill prompt (+ partial)
                        if policy == "carry":
                            carried += sum(len(gen["tok"][i]) for i in alive)
                        else:
                            lost += sum(len(gen["tok"][i]) for i in alive)
                            for i in alive:
                                gen["tok"][i] = []
    hist = [lags.count(d) / len(lags) for d in range(eta + 1)]
    return {"policy": policy, "eta": eta, "s_per_step": t / n, "learner_wait": waited / n, "token_lag_mean": statistics.fmean(lags),
            "token_lag_hist": [round(h, 3) for h in hist], "carried_per_step": carried / n, "lost_per_step": lost / n,
            "decode_steps_per_step": decode_steps / n}  # fmt: skip


def batches(n: int, rows: int, mean: int, seed: int) -> list[list[int]]:
    """Long-tailed completion lengths (lognormal, capped at 4x the mean), one list per batch."""
    rng = random.Random(seed)
    return [[max(1, min(4 * mean, int(rng.lognormvariate(0, 0.8) * mean * 0.73))) for _ in range(rows)] for _ in range(n)]


def real(args) -> None:
    """tiny-llama under thread eta 1, interrupt on and off, alternated round by round."""
    import os
    import platform
    import subprocess
    import tempfile
    from pathlib import Path

    import torch

    from covey.train.config import load_config
    from covey.train.trainer import Trainer

    torch.set_num_threads(1)
    out = []
    with tempfile.TemporaryDirectory() as root:
        for r in range(args.rounds):
            for on in (False, True):
                cfg = load_config(None, [
                    "model.name=tiny-llama", "task.params={digits: 2, n_train: 256, n_test: 16}", "reward_workers=0",
                    f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
                    f"sampling.max_new_tokens={args.new_tokens}", "log.progress=false", "log.report_to=[jsonl]",
                    "algo.kl=null", f"steps={args.steps}", "runtime.executor=thread", "runtime.max_staleness=1",
                    f"runtime.interrupt_on_update={str(on).lower()}", "threads=1",
                ])  # fmt: skip
                trainer = Trainer(cfg, Path(root) / f"{r}-{on}")
                try:
                    rows = [trainer.step() for _ in range(args.steps)][1:]  # the first step is warm-up
                finally:
                    trainer.close()
                mean = lambda key: statistics.fmean(m.get(key, 0.0) for m in rows)  # noqa: E731
                rec = {"round": r, "interrupt": on, "s_per_step": mean("time/step"), "learner_wait": mean("time/learner_wait"),
                       "generate_s": mean("time/generate"), "token_lag_mean": mean("async/token_lag_mean"),
                       "token_lag_0": mean("async/token_lag/0"), "interrupts": mean("async/interrupts"),
                       "carried_tokens": mean("async/carried_tokens"), "length_mean": mean("length/mean")}  # fmt: skip
                out.append(rec)
                print(json.dumps(rec), flush=True)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), platform.processor())
    print(json.dumps({"cpu": name, "cores": os.cpu_count(), "load_average": os.getloadavg()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real", action="store_true", help="tiny-llama instead of the simulated clock")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    args = ap.parse_args()
    if args.real:
        return real(args)
    lens = batches(200, rows=32, mean=40, seed=0)
    for learn in (60, 150):  # learning shorter / longer than a typical batch (about 130 steps: its longest row)
        for eta in (1, 2):
            for policy in ("wait", "carry", "restart"):
                print(json.dumps({"learn": learn, **simulate(lens, learn, eta, policy)}))


if __name__ == "__main__":
    main()
