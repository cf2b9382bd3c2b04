"""`covey plan` against measured peaks on the CPU: prints one JSON line per setting.

For each setting, the plan's learner peak (one device, inline executor) and engine peak are compared
with what `covey.bench.memory` measures: the live tensor bytes of a learner update (weights, AdamW
state and batch before it, plus the high-water mark of what the update allocates) and of building
the engine and one generate call. Run:

    .venv/bin/python benchmarks/plan_check.py --model smollm2-135m-instruct
    .venv/bin/python benchmarks/plan_check.py --model tiny-llama
"""

import argparse
import json
import time

from covey.bench.memory import engine_peak, learner_peak
from covey.plan import GiB, plan_config
from covey.train.config import load_config

# (name, overrides): the quickstart's shape (8 prompts x 8, micro-batch 16), then one setting changed each
SETTINGS = [
    ("base", []),
    ("kl (reference model)", ["algo.kl={name: k3, coef: 0.04}"]),
    ("gradient checkpointing", ["model.gradient_checkpointing=true"]),
    ("lora r=16", ["model.lora={r: 16}"]),
    ("fp32", ["model.dtype=fp32", "engine.dtype=fp32"]),
    ("micro-batch 64", ["optim.micro_batch_size=64"]),
]


def check(model: str, prompt_tokens: int, new_tokens: int, names: list[str] | None = None) -> list[dict]:
    base = [f"model.name={model}", "model.dtype=bf16", "engine.dtype=bf16", "device=cpu", "algo.kl=null",
            "rollout.prompts_per_step=8", "rollout.group_size=8", f"sampling.max_new_tokens={new_tokens}",
            "optim.micro_batch_size=16"]  # fmt: skip
    out = []
    for name, extra in SETTINGS:
        if names and name not in names:
            continue
        overrides = base + extra
        plan = plan_config(None, overrides, prompt_tokens=prompt_tokens)
        cfg = load_config(None, overrides)
        t = time.perf_counter()
        learner, engine = learner_peak(cfg, prompt_tokens), engine_peak(cfg, prompt_tokens)
        row = {
            "model": model, "setting": name, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
            "learner_plan_gib": round(plan.learner.peak / GiB, 4), "learner_measured_gib": round(learner["peak"] / GiB, 4),
            "learner_ratio": round(plan.learner.peak / learner["peak"], 3),
            "engine_plan_gib": round(plan.engine.peak / GiB, 4), "engine_measured_gib": round(engine["peak"] / GiB, 4),
            "engine_ratio": round(plan.engine.peak / engine["peak"], 3), "seconds": round(time.perf_counter() - t, 1),
        }  # fmt: skip
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--only", nargs="*", help="setting names to run")
    a = ap.parse_args()
    check(a.model, a.prompt_tokens, a.new_tokens, a.only)
