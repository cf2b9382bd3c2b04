"""Objectives ablation: GRPO against five wave-2 objectives at equal compute, from the SFT-warmed tiny
Llama on arithmetic. Prints a markdown table (docs/algorithms.md, "Ablation") and writes a JSON summary.

    covey sft --model tiny-llama --task arithmetic --out runs/sft-tiny   # once
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/objectives_ablation.py --seeds 0
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/objectives_ablation.py --seeds 1   # beside it, then:
    .venv/bin/python benchmarks/objectives_ablation.py --table-only

Equal compute: every method generates the same rows (prompts x group x steps, same seeds, so the
first step's batch is identical) and takes the same optimizer steps (two mini-batches per step, so
the terms on pi_theta vs pi_old act on the second); no KL; lr 1e-4; fp32. Scored before (once per
seed: same model) and after on the 100 train problems (`--eval-samples` samples at T=1: the expected
reward RL maximises) and greedily on the 100 held-out problems (`covey.eval.runner.evaluate`, seed
1234). Writes OUT/seed<k>/<method>.jsonl.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from _runs import load_seeds, write_rows
from covey.eval.runner import evaluate
from covey.train.config import validate_config
from covey.train.trainer import Trainer

METHODS = {
    "grpo": {},
    "rover": {"advantage": {"name": "rover"}, "surrogate": {"name": "rover"}, "aggregation": {"name": "token-mean"}},
    "etr_provisional": {"surrogate": {"name": "etr_provisional"}, "aggregation": {"name": "token-mean"}},
    "r2vpo_provisional": {"surrogate": {"name": "r2vpo_provisional"}, "aggregation": {"name": "token-mean"},
                          "regularizers": [{"name": "r2vpo_provisional"}]},
    "grpo+llds": {"regularizers": [{"name": "llds"}]},
    "disco+disco_kl": {"advantage": {"name": "disco"}, "surrogate": {"name": "reinforce"},
                       "aggregation": {"name": "seq-mean-token-mean"}, "regularizers": [{"name": "disco_kl"}]},
}  # fmt: skip
STEP_KEYS = ("reward/mean", "learn/grad_norm", "surrogate/ratio_max", "learn/loss")


def config(name: str, a, seed: int, out: Path) -> dict:
    return validate_config({
        "model": {"name": a.model, "dtype": "fp32"}, "task": {"name": "arithmetic"}, "seed": seed,
        "rollout": {"prompts_per_step": a.prompts, "group_size": a.group_size},
        "sampling": {"temperature": 1.0, "max_new_tokens": 8}, "engine": {"dtype": "fp32"},
        "algo": {"preset": "grpo", "kl": None, **METHODS[name]}, "optim": {"lr": a.lr, "mini_batches": 2},
        "reward_workers": 0, "log": {"progress": False, "report_to": ["jsonl"], "dir": str(out)},
        "checkpoint": {"every": 0}, "steps": a.steps,
    })  # fmt: skip


def run(name: str, seed: int, a) -> list[dict]:
    out = a.out / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(config(name, a, seed, out / "runs"), out / "runs" / name)
    train, test = list(trainer.task.examples("train")), list(trainer.task.examples("test"))

    def scores() -> dict:
        ev = lambda items, **kw: evaluate(trainer.engine, trainer.tokenizer, trainer.task, items, max_new_tokens=8, seed=1234, **kw)["accuracy"]  # noqa: E731
        return {"train_sampled": ev(train, n=a.eval_samples, temperature=1.0), "test_greedy": ev(test)}

    start = out / "start.json"  # the same model and evaluation seed for every method: scored once per seed
    if not start.exists():
        start.write_text(json.dumps(scores()))
    rows = [{"step": 0, **json.loads(start.read_text())}]
    t0 = time.perf_counter()
    try:
        for step in range(1, a.steps + 1):
            m = trainer.step()
            rows.append({"step": step, **{k.split("/")[-1]: float(m[k]) for k in STEP_KEYS if k in m}})
        rows[-1].update(scores())
    finally:
        trainer.close()
    rows[-1]["seconds"] = time.perf_counter() - t0
    write_rows(out / f"{name}.jsonl", rows)
    return rows


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def summarise(out: Path) -> dict:
    summary = {}
    for name in METHODS:
        runs = load_seeds(out, name)
        if not runs:
            continue
        per = [{"train_start": r[0]["train_sampled"], "train_end": r[-1]["train_sampled"], "test_start": r[0]["test_greedy"],
                "test_end": r[-1]["test_greedy"], "reward_first5": _mean(x["mean"] for x in r[1:6]),
                "reward_last5": _mean(x["mean"] for x in r[-5:]), "seconds": r[-1]["seconds"]} for r in runs]  # fmt: skip
        summary[name] = {"seeds": len(per), "mean": {k: _mean(p[k] for p in per) for k in per[0]}, "per_seed": per}
    return summary


def table(summary: dict) -> str:
    lines = ["| method | seeds | train acc. (T=1) start -> end | per seed end | held-out greedy start -> end | batch reward, first 5 -> last 5 steps | s per run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, s in summary.items():
        m = s["mean"]
        ends = ", ".join(f"{p['train_end']:.3f}" for p in s["per_seed"])
        lines.append(f"| `{name}` | {s['seeds']} | {m['train_start']:.3f} -> {m['train_end']:.3f} | {ends} | {m['test_start']:.2f} -> "
                     f"{m['test_end']:.2f} | {m['reward_first5']:.3f} -> {m['reward_last5']:.3f} | {m['seconds']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def main(a) -> None:
    torch.set_num_threads(1)
    if not a.table_only:
        for seed in [int(s) for s in a.seeds.split(",")]:
            for name in a.only or list(METHODS):
                rows = run(name, seed, a)
                print(json.dumps({"method": name, "seed": seed, "seconds": round(rows[-1]["seconds"], 1), "start": rows[0], "end": rows[-1]}), flush=True)
    summary = summarise(a.out)
    setting = {"model": a.model, "task": "arithmetic (defaults)", "prompts_per_step": a.prompts, "group_size": a.group_size, "lr": a.lr,
               "steps": a.steps, "mini_batches": 2, "eval_samples": a.eval_samples, "measured": time.strftime("%Y-%m-%d", time.gmtime())}  # fmt: skip
    Path(a.json).write_text(json.dumps({"setting": setting, "methods": summary}, indent=1) + "\n")
    print(table(summary))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="runs/sft-tiny")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-samples", type=int, default=8, help="samples per train problem at T=1")
    ap.add_argument("--seeds", default="0", help="comma-separated run seeds")
    ap.add_argument("--only", type=lambda s: s.split(","), help="comma-separated methods (default: all)")
    ap.add_argument("--out", type=Path, default=Path("runs/objectives-ablation"))
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--json", default="benchmarks/objectives_ablation.json")
    args = ap.parse_args()
    if unknown := [n for n in args.only or [] if n not in METHODS]:
        ap.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(METHODS)})")
    main(args)
