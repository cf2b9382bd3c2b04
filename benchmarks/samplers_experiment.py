"""Prompt samplers at equal generated tokens: uniform vs dynamic vs VADE vs SPO vs DARS (docs/sampling.md).

Each method trains the same warm-started policy on the same task until it has generated `--tokens`
completion tokens (every engine call during training counts, including the rounds dynamic sampling
filters away and DARS's second stage). Logged per step: tokens generated so far, the fraction of
rows with a non-zero advantage, and every `--eval-every` steps the held-out greedy accuracy.

    covey sft --model tiny-llama --task arithmetic --out runs/sft-tiny
    python benchmarks/samplers_experiment.py --model runs/sft-tiny --out runs/samplers-exp
    python benchmarks/samplers_experiment.py --plot-only --out runs/samplers-exp   # table + plot again

Writes OUT/seed<k>/<method>.jsonl (one row per step), OUT/summary.json, OUT/table.md, OUT/samplers.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from _runs import load_seeds, seed_mean, write_rows, write_summary
from covey.eval.runner import evaluate
from covey.train.config import validate_config
from covey.train.trainer import Trainer

B, G = 8, 8  # prompts x completions per step for the group methods (SPO: B*G prompts x 1)

METHODS: dict[str, dict] = {
    "uniform": {},
    "dynamic": {"algo": {"dynamic_sampling": True, "max_gen_batches": 4}},
    "vade": {"sampler": {"name": "vade"}},
    "spo": {"sampler": {"name": "spo", "rho_type": "constant"}, "algo": {"advantage": {"name": "spo"}}, "rollout": {"prompts_per_step": B * G, "group_size": 1}},
    "dars": {"rollout": {"strategy": {"name": "dars", "schedule": "et", "n_max": 2 * G}}, "algo": {"advantage": {"name": "dr_grpo"}}},
}


def config(model: str, method: str, seed: int, lr: float, max_new_tokens: int, n_test: int) -> dict:
    raw = {
        "model": {"name": model, "dtype": "fp32"},
        "engine": {"dtype": "fp32"},
        "task": {"name": "arithmetic", "params": {"n_test": n_test}},
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


def run(method: str, seed: int, args) -> list[dict]:
    out = args.out / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    raw = config(args.model, method, seed, args.lr, args.max_new_tokens, args.n_test)
    trainer = Trainer(validate_config(raw), out / "runs" / method)
    eval_items = list(trainer.task.examples("test"))
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
            print(method, seed, json.dumps(row), flush=True)
    finally:
        trainer.close()
    rows[-1]["seconds"] = time.perf_counter() - t0
    write_rows(out / f"{method}.jsonl", rows)
    return rows


def summarise(out: Path, methods: list[str]) -> str:
    """Markdown table, mean over seeds (held-out accuracy also per seed)."""
    lines = ["| method | seeds | steps | tokens | trained rows with A != 0 | A != 0 rows per 1k tokens | held-out acc. start | end (per seed) | end - start |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    summary = {}
    for method in methods:
        runs = load_seeds(out, method)
        if not runs:
            continue
        per = []
        for rows in runs:
            steps = [r for r in rows if r["step"] > 0]
            signal = sum(r["nonzero_adv_frac"] * r["rows"] for r in steps) / max(sum(r["rows"] for r in steps), 1)
            accs = [r["eval_accuracy"] for r in rows if "eval_accuracy" in r]
            per_k = 1000 * sum(r["nonzero_adv_frac"] * r["rows"] for r in steps) / max(rows[-1]["tokens"], 1)
            per.append({"steps": len(steps), "tokens": rows[-1]["tokens"], "nonzero_adv_frac": signal,
                        "signal_rows_per_1k_tokens": per_k, "acc_start": accs[0], "acc_end": accs[-1]})  # fmt: skip
        mean = seed_mean(per)
        summary[method] = {"mean": mean, "per_seed": per}
        ends = ", ".join(f"{p['acc_end']:.1%}" for p in per)
        lines.append(f"| {method} | {len(per)} | {mean['steps']:.0f} | {mean['tokens']:.0f} | {mean['nonzero_adv_frac']:.1%} | {mean['signal_rows_per_1k_tokens']:.0f} | "
                     f"{mean['acc_start']:.1%} | {mean['acc_end']:.1%} ({ends}) | {mean['acc_end'] - mean['acc_start']:+.1%} |")  # fmt: skip
    return write_summary(out, summary, lines)


def plot(out: Path, methods: list[str], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, method in enumerate(methods):
        color = f"C{i}"
        for j, rows in enumerate(load_seeds(out, method)):
            steps = [r for r in rows if r["step"] > 0]
            k = 5  # moving average over 5 steps
            sig = [r["nonzero_adv_frac"] for r in steps]
            smooth = [sum(sig[max(0, t - k + 1) : t + 1]) / len(sig[max(0, t - k + 1) : t + 1]) for t in range(len(sig))]
            label = method if j == 0 else None
            ax1.plot([r["tokens"] for r in steps], smooth, color=color, alpha=0.8, label=label)
            ev = [r for r in rows if "eval_accuracy" in r]
            ax2.plot([r["tokens"] for r in ev], [r["eval_accuracy"] for r in ev], color=color, marker=".", alpha=0.8, label=label)
    ax1.set(xlabel="completion tokens generated", ylabel="rows with non-zero advantage (5-step mean)", title="learning signal")
    ax2.set(xlabel="completion tokens generated", ylabel="held-out accuracy (greedy)", title="held-out accuracy, one line per seed")
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
    p.add_argument("--n-test", type=int, default=100, help="held-out arithmetic problems (1-digit problems: 207 in all, 100 go to training)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--seeds", default="0", help="comma-separated run seeds")
    p.add_argument("--plot", type=Path, default=None, help="where to save the plot (default OUT/samplers.png)")
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args()
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown method {unknown[0]!r}; methods are {', '.join(METHODS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        for seed in [int(x) for x in args.seeds.split(",")]:
            for method in methods:
                run(method, seed, args)
    print(summarise(args.out, methods))
    plot(args.out, methods, args.plot or args.out / "samplers.png")


if __name__ == "__main__":
    main()
