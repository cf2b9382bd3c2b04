"""Partial rollouts (`april`) vs i.i.d. groups (`group`) under a long-tailed completion length.

Runs S rollout steps of B prompts x G samples with each strategy on the same model (alternating per
step, so both see the same machine load; no training: the engine's policy version is bumped every
step so carried tokens count as stale). Long tail: a stop set of characters ends a completion with a
small per-token probability on the random tiny model (lengths roughly geometric, capped at
--new-tokens). Prints one JSON line: samples/s of each (samples returned / wall time of rollout),
the ratio, decoded tokens per returned sample, mean returned length, and APRIL's stale-token fraction.

    .venv/bin/python benchmarks/bench_april.py --steps 8 --prompts 8 --group 4 --new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import load
from covey.samplers import Draw
from covey.strategies import STRATEGIES, RolloutContext

STOP_CHARS = "0123456789abcdefghij"  # --stops of these end a completion (the tiny tokenizer has 358 ids)


def main(a) -> dict:
    torch.set_num_threads(a.threads)
    model, tok = load(a.model)
    engine = TorchEngine(model, tok, dtype=a.dtype)
    pool = [{"id": i, "prompt": f"{i % 97}+{i % 13}="} for i in range(100_000)]
    stats = {name: {"seconds": 0.0, "samples": 0, "decoded": 0, "tokens": 0, "stale": []} for name in ("group", "april")}
    strategies = {"group": STRATEGIES.build("group", {}),
                  "april": STRATEGIES.build("april", {"over_provision": a.over_provision, "chunk_tokens": a.chunk})}  # fmt: skip
    cursor = {"group": 0, "april": 0}
    for step in range(a.steps):
        engine.version = step
        for name, strat in strategies.items():
            def draw(k, name=name):
                out = [Draw(it, a.group) for it in pool[cursor[name] : cursor[name] + k]]
                cursor[name] += k
                return out

            draws = draw(a.prompts)
            ctx = RolloutContext(
                engine=engine, tokenizer=tok, draws=draws,
                sampling=lambda r, step=step: SamplingParams(seed=1000 * step + r, max_new_tokens=a.new_tokens,
                                                             stop_strings=tuple(STOP_CHARS[: a.stops]), ignore_eos=True),
                score=lambda b: {}, draw=draw, step=step, policy_version=step,
            )  # fmt: skip
            t0 = time.perf_counter()
            batch, m = strat.rollout([d.item for d in draws], ctx)
            s = stats[name]
            s["seconds"] += time.perf_counter() - t0
            s["samples"] += len(batch)
            s["tokens"] += int(batch.lengths.sum())
            s["decoded"] += int(m.get("april/decoded_tokens", batch.lengths.sum()))
            if name == "april":
                s["stale"].append(m["april/stale_token_frac"])
    g, p = stats["group"], stats["april"]
    row = {
        "model": a.model, "steps": a.steps, "prompts": a.prompts, "group": a.group, "new_tokens": a.new_tokens,
        "over_provision": a.over_provision, "chunk": a.chunk, "stops": a.stops,
        "group_samples_per_s": round(g["samples"] / g["seconds"], 2), "april_samples_per_s": round(p["samples"] / p["seconds"], 2),
        "ratio": round((p["samples"] / p["seconds"]) / (g["samples"] / g["seconds"]), 3),
        "group_mean_len": round(g["tokens"] / g["samples"], 2), "april_mean_len": round(p["tokens"] / p["samples"], 2),
        "group_decoded_per_sample": round(g["decoded"] / g["samples"], 2), "april_decoded_per_sample": round(p["decoded"] / p["samples"], 2),
        "april_stale_token_frac": round(sum(p["stale"][1:]) / max(len(p["stale"]) - 1, 1), 4),
        "group_seconds": round(g["seconds"], 2), "april_seconds": round(p["seconds"], 2), "loadavg": os.getloadavg()[0],
    }  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--over-provision", type=float, default=2.0)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--stops", type=int, default=15, help="stop characters (more: shorter completions)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--threads", type=int, default=1)
    main(ap.parse_args())
