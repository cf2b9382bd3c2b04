"""Prompt samplers at equal generated tokens: uniform vs dynamic vs VADE vs SPO vs DARS (docs/sampling.md).

Each method trains the same warm-started policy on the same task until it has generated `--tokens`
completion tokens (every engine call during training counts, including the rounds dynamic sampling
filters away and DARS's second stage). Logged per step: tokens generated so far, the fraction of
rows with a non-zero advantage, and every `--eval-every` steps the held-out greedy accuracy.

    covey sft --model tiny-llama --task arithmetic --out runs/sft-tiny
    python benchmarks/samplers_experiment.py --model runs/sft-tiny --out runs/samplers-exp
    python benchmarks/samplers_experiment.py --plot-only --out runs/samplers-exp   # table + plot again

Writes OUT/<method>.jsonl (one row per step), OUT/summary.json, OUT/table.md and OUT/samplers.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from covey.eval.runner import evaluate
from covey.train.config import validate_config
from covey.train.trainer import Trainer

B, G = 8, 8  # prompts x completions per step for the group methods (SPO: B*G prompts x 1)

METHODS: dict[str, dict] = {
    "uniform": {},
    "dynamic": {"algo": {"dynamic_sampling": True, "max_gen_batches": 4}},
    "vade": {"sampler": {"name": "vade"}},
    "spo": {"sampler": {"name": "spo"}, "algo": {"advantage": {"name": "spo"}}, "rollout": {"prompts_per_step": B * G, "group_size": 1}},
    "dars": {"rollout": {"strategy": {"name": "dars", "schedule": "et", "n_max": 2 * G}}, "algo": {"advantage": {"name": "dr_grpo"}}},
}


def config(model: str, method: str, seed: int, lr: float, max_new_tokens: int) -> dict:
    raw = {
        "model": {"name": model, "dtype": "fp32"},
        "engine": {"dtype": "fp32"},
        "task": {"name": "arithmetic"},
        "sampling": {"temperature": 1.0, "max_new_tokens": max_new_tokens},
        "rollout": {"prompts_per_step": B, "group_size": G},
        "algo": {"preset": "grpo", "kl": None},
        "optim": {"lr": lr},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "steps": 10_000,
        "seed": seed,
    }
    for key, val in METHODS[method].items():
        raw[key] = {**raw.get(key, {}), **val}
    return raw


def run(method: str, args) -> list[dict]:
    trainer = Trainer(validate_config(config(args.model, method, args.seed, args.lr, args.max_new_tokens)), args.out / "runs" / method)
    eval_items = list(trainer.task.examples("test"))[: args.eval_size]
    counter = {"tokens": 0, "on": True, "rows": 0, "signal": 0}
    generate, advantage = trainer.engine.generate, trainer.advantage

    def counting_generate(*a, **kw):
        gen = generate(*a, **kw)
        if counter["on"]:
            counter["tokens"] += int(gen.completion_mask.sum())
        return gen

    def counting_advantage(batch):
        out = advantage(batch)
        a = out.advantages if out.advantages.dim() == 1 else out.advantages.abs().amax(-1)
        keep = torch.ones_like(a) if out.sample_mask is None else out.sample_mask
        counter["rows"] += len(batch)
        counter["signal"] += int(((a.abs() > 1e-8) & (keep > 0)).sum())
        return out

    trainer.engine.generate, trainer.advantage = counting_generate, counting_advantage

    def held_out() -> float:
        counter["on"] = False
        acc = evaluate(trainer.engine, trainer.tokenizer, trainer.task, eval_items, max_new_tokens=args.max_new_tokens)["accuracy"]
        counter["on"] = True
        return acc

    rows = [{"step": 0, "tokens": 0, "eval_accuracy": held_out()}]
    t0 = time.perf_counter()
    try:
        while counter["tokens"] < args.tokens:
            counter["rows"] = counter["signal"] = 0
            m = trainer.step()
            row = {"step": trainer.step_num, "tokens": counter["tokens"], "rows": counter["rows"],
                   "nonzero_adv_frac": counter["signal"] / max(counter["rows"], 1),
                   "reward": m.get("reward/mean"), "zero_signal_groups": m.get("prompts/zero_signal_frac")}  # fmt: skip
            if trainer.step_num % args.eval_every == 0 or counter["tokens"] >= args.tokens:
                row["eval_accuracy"] = held_out()
            rows.append(row)
            print(method, json.dumps(row), flush=True)
    finally:
        trainer.close()
    rows[-1]["seconds"] = time.perf_counter() - t0
    with open(args.out / f"{method}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def summarise(out: Path, methods: list[str]) -> str:
    lines = ["| method | steps | tokens | non-zero-advantage rows | held-out acc. start | end | best |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    summary = {}
    for method in methods:
        path = out / f"{method}.jsonl"
        if not path.exists():
            continue
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        steps = [r for r in rows if r["step"] > 0]
        signal = sum(r["nonzero_adv_frac"] * r["rows"] for r in steps) / max(sum(r["rows"] for r in steps), 1)
        accs = [r["eval_accuracy"] for r in rows if "eval_accuracy" in r]
        summary[method] = {"steps": len(steps), "tokens": rows[-1]["tokens"], "nonzero_adv_frac": signal,
                           "acc_start": accs[0], "acc_end": accs[-1], "acc_best": max(accs)}  # fmt: skip
        s = summary[method]
        lines.append(f"| {method} | {s['steps']} | {s['tokens']} | {signal:.1%} | {accs[0]:.1%} | {accs[-1]:.1%} | {max(accs):.1%} |")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    return table


def plot(out: Path, methods: list[str], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for method in methods:
        path = out / f"{method}.jsonl"
        if not path.exists():
            continue
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        steps = [r for r in rows if r["step"] > 0]
        ax1.plot([r["tokens"] for r in steps], [r["nonzero_adv_frac"] for r in steps], label=method)
        ev = [r for r in rows if "eval_accuracy" in r]
        ax2.plot([r["tokens"] for r in ev], [r["eval_accuracy"] for r in ev], marker="o", label=method)
    ax1.set(xlabel="completion tokens generated", ylabel="rows with non-zero advantage", title="learning signal per step")
    ax2.set(xlabel="completion tokens generated", ylabel="held-out accuracy (greedy)", title="held-out accuracy")
    ax1.legend()
    fig.tight_layout()
    fig.savefig(dest, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="runs/sft-tiny")
    p.add_argument("--out", type=Path, default=Path("runs/samplers-exp"))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--tokens", type=int, default=12_000, help="completion tokens each method may generate")
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--eval-size", type=int, default=200)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", type=Path, default=None, help="where to save the plot (default OUT/samplers.png)")
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args()
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown method {unknown[0]!r}; methods are {', '.join(METHODS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        for method in methods:
            run(method, args)
    print(summarise(args.out, methods))
    plot(args.out, methods, args.plot or args.out / "samplers.png")


if __name__ == "__main__":
    main()
