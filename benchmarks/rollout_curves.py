"""Short learning runs, one per rollout strategy, from the SFT-warmed tiny Llama on arithmetic: does
each strategy raise the policy's accuracy? Writes docs/rollouts_learning.png and a JSON summary.

    covey sft --model tiny-llama --task arithmetic --out runs/sft-tiny   # once
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_curves.py --seeds 0,1
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_curves.py --seeds 1 --only latr,april  # some
    .venv/bin/python benchmarks/rollout_curves.py --plot-only             # table + plot again

`--only` re-runs some strategies: their JSON entries are replaced, the others' earlier ones kept
(each entry has the date it was `measured`); the plot shows the runs in OUT.

Setting (docs/rollouts.md "Learning runs" says why): the default arithmetic task (1-digit, 2
operands, "+-*": 100 train + 100 test problems), 32 prompts x 8 per step, lr 1e-4, 60 steps, fp32,
no KL. Every `--eval-every` steps the policy is scored on
  - the 100 train problems, 8 samples each at T=1: the policy's expected reward on the training
    distribution (what RL maximises), without the noise of one batch's mean reward,
  - the 100 held-out test problems, greedy and 8 samples at T=1 (the same `covey.eval.runner.evaluate`
    call as benchmarks/samplers_experiment.py).
Logged per step: the batch reward (tppo: mean over its finished responses) and the surrogate's ratio
and clip-fraction metrics. Writes OUT/seed<k>/<strategy>.jsonl, the summary JSON and the plot.
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

RUNS = {
    "group": ({"name": "group"}, {}),
    "treepo": ({"name": "treepo", "segment_tokens": 2}, {"advantage": {"name": "treepo"}}),
    "branch": ({"name": "branch", "segment_tokens": 1}, {"advantage": {"name": "branch_grpo"}}),
    "latr": ({"name": "latr", "tau_abs": 0.05, "tau_rel": 0.5, "filter_steps": [3], "tau_ed": 0.3}, {}),  # the code's mix_ratio schedule
    "latr_const": ({"name": "latr", "tau_abs": 0.05, "tau_rel": 0.5, "filter_steps": [3], "tau_ed": 0.3, "mix_ratio": 1.0}, {}),
    "latr_mix": ({"name": "latr", "tau_abs": 0.05, "tau_rel": 0.5, "filter_steps": [3], "tau_ed": 0.3, "mix_ratio": 0.5}, {}),
    "april": ({"name": "april", "chunk_tokens": 2}, {}),  # the code: surplus dropped, pi_old recomputed, no correction
    "igrpo": ({"name": "igrpo"}, {}),
    "cog_rethinker": ({"name": "cog_rethinker"}, {}),
    "arrol": ({"name": "arrol", "check_tokens": 3, "warmup_rows": 64}, {}),
    "tppo": ({"name": "tppo", "window_tokens": 4}, {"advantage": {"name": "tppo"}}),
    "dynamic": ({"name": "dynamic", "inner": "group", "max_rounds": 4}, {}),
    "dars": ({"name": "dars", "schedule": "et", "n_max": 16}, {"advantage": {"name": "dr_grpo"}}),  # as benchmarks/samplers_experiment.py
}
STEP_KEYS = ("surrogate/ratio_mean", "surrogate/ratio_min", "surrogate/ratio_max", "surrogate/clip_frac", "learn/grad_norm",
             "prompts/zero_signal_frac")


def config(name: str, a, seed: int, out: Path) -> dict:
    strategy, algo = RUNS[name]
    return validate_config({
        "model": {"name": a.model, "dtype": "fp32"}, "task": {"name": "arithmetic"}, "seed": seed,
        "rollout": {"prompts_per_step": a.prompts, "group_size": a.group_size, "strategy": strategy},
        "sampling": {"temperature": 1.0, "max_new_tokens": 8}, "engine": {"dtype": "fp32"},
        "algo": {"preset": "grpo", "kl": None, **algo}, "optim": {"lr": a.lr}, "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"], "dir": str(out)}, "checkpoint": {"every": 0}, "steps": a.steps,
    })  # fmt: skip


def run(name: str, seed: int, a) -> list[dict]:
    out = a.out / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(config(name, a, seed, out / "runs"), out / "runs" / name)
    train, test = list(trainer.task.examples("train")), list(trainer.task.examples("test"))

    def held_out() -> dict:
        ev = lambda items, **kw: evaluate(trainer.engine, trainer.tokenizer, trainer.task, items, max_new_tokens=8, seed=1234, **kw)["accuracy"]  # noqa: E731
        return {"train_sampled": ev(train, n=8, temperature=1.0), "train_greedy": ev(train),
                "test_sampled": ev(test, n=8, temperature=1.0), "test_greedy": ev(test)}  # fmt: skip

    key = "tppo/finished_reward" if name == "tppo" else "reward/mean"  # tppo's batch rows are mostly unfinished
    rows = [{"step": 0, **held_out()}]
    t0 = time.perf_counter()
    try:
        for step in range(1, a.steps + 1):
            m = trainer.step()
            row = {"step": step, "reward": float(m[key]), "rows": int(m.get("prompts/rollouts_per_prompt_mean", 0) * m.get("prompts/unique", 0)),
                   **{k.split("/")[-1]: float(m[k]) for k in STEP_KEYS if k in m}}  # fmt: skip
            if step % a.eval_every == 0 or step == a.steps:
                row.update(held_out())
            rows.append(row)
    finally:
        trainer.close()
    rows[-1]["seconds"] = time.perf_counter() - t0
    write_rows(out / f"{name}.jsonl", rows)
    return rows


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def summarise(out: Path, names: list[str], window: int) -> dict:
    """Per strategy: accuracies at the first and last evaluation and the batch reward over the first
    and last `window` steps, each the mean over seeds (and per seed)."""
    summary = {}
    for name in names:
        runs = load_seeds(out, name)
        if not runs:
            continue
        per = []
        for rows in runs:
            ev = [r for r in rows if "train_sampled" in r]
            steps = [r for r in rows if r["step"] > 0]
            per.append({
                **{f"{k}_start": ev[0][k] for k in ("train_sampled", "train_greedy", "test_sampled", "test_greedy")},
                **{f"{k}_end": ev[-1][k] for k in ("train_sampled", "train_greedy", "test_sampled", "test_greedy")},
                "reward_early": _mean(r["reward"] for r in steps[:window]), "reward_late": _mean(r["reward"] for r in steps[-window:]),
                "ratio_max_step1": steps[0].get("ratio_max"), "zero_signal_frac": _mean(r.get("zero_signal_frac", 0.0) for r in steps), "steps": len(steps), "seconds": rows[-1].get("seconds"),
            })  # fmt: skip
        summary[name] = {"seeds": len(per), "mean": {k: _mean(p[k] for p in per) for k in per[0] if per[0][k] is not None}, "per_seed": per}
    return summary


def table(summary: dict) -> str:
    lines = ["| strategy | seeds | train acc. (T=1) start -> end | per seed end | train greedy | held-out greedy | held-out T=1 | batch reward, first 10 -> last 10 steps |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, s in summary.items():
        m, per = s["mean"], s["per_seed"]
        ends = ", ".join(f"{p['train_sampled_end']:.3f}" for p in per)
        lines.append(f"| `{name}` | {s['seeds']} | {m['train_sampled_start']:.3f} -> {m['train_sampled_end']:.3f} | {ends} | "
                     f"{m['train_greedy_start']:.2f} -> {m['train_greedy_end']:.2f} | {m['test_greedy_start']:.2f} -> {m['test_greedy_end']:.2f} | "
                     f"{m['test_sampled_start']:.3f} -> {m['test_sampled_end']:.3f} | {m['reward_early']:.3f} -> {m['reward_late']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def plot(out: Path, names: list[str], dest: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, name in enumerate(names):
        runs = load_seeds(out, name)
        if not runs:
            continue
        color, lw = f"C{i % 10}", 2.2 if name == "group" else 1.2
        style = ":" if i >= 10 else "-"
        n = min(len(r) for r in runs)
        reward = [_mean(r[t]["reward"] for r in runs) for t in range(1, n)]
        k = 10
        smooth = [_mean(reward[max(0, t - k + 1) : t + 1]) for t in range(len(reward))]
        ax1.plot(range(1, n), smooth, color=color, lw=lw, ls=style, label=name)
        steps = [r["step"] for r in runs[0] if "train_sampled" in r]
        acc = [_mean(next(x["train_sampled"] for x in r if x["step"] == s) for r in runs) for s in steps]
        ax2.plot(steps, acc, color=color, lw=lw, ls=style, marker=".", label=name)
    ax1.set(xlabel="step", ylabel="batch mean reward (10-step moving average, mean over seeds)", title="batch reward")
    ax2.set(xlabel="step", ylabel="accuracy on the 100 train problems (8 samples, T=1)", title="policy accuracy, mean over seeds")
    ax2.legend(fontsize=8, ncol=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)


def merge_previous(path: Path, setting: dict, summary: dict) -> dict:
    """The strategies with runs in OUT replace their entries in the JSON at `path`; the JSON's other
    entries (earlier runs of the same setting, e.g. before `--only`) are kept, in RUNS order. A JSON
    of another setting is not merged."""
    old = json.loads(path.read_text()) if path.exists() else {}
    if old.get("setting") != setting:
        return summary
    kept = {**{k: v for k, v in old["strategies"].items() if k in RUNS}, **summary}
    return {name: kept[name] for name in RUNS if name in kept}


def main(a) -> None:
    torch.set_num_threads(1)
    names = a.only or list(RUNS)
    if not a.plot_only:
        for seed in [int(s) for s in a.seeds.split(",")]:
            for name in names:
                rows = run(name, seed, a)
                print(json.dumps({"strategy": name, "seed": seed, "seconds": round(rows[-1]["seconds"], 1), "start": rows[0], "end": rows[-1]}), flush=True)
    every = [n for n in RUNS if load_seeds(a.out, n)]
    summary = summarise(a.out, every, window=10)
    for entry in summary.values():
        entry["measured"] = time.strftime("%Y-%m-%d", time.gmtime())
    setting = {"model": a.model, "task": "arithmetic (defaults)", "prompts_per_step": a.prompts, "group_size": a.group_size, "lr": a.lr, "steps": a.steps}
    summary = merge_previous(Path(a.json), setting, summary)
    Path(a.json).write_text(json.dumps({"setting": setting, "strategies": summary}, indent=1) + "\n")
    print(table(summary))
    seeds = sorted({p.parent.name[4:] for p in a.out.glob("seed*/*.jsonl")})
    title = f"tiny-llama (SFT-warmed) on arithmetic: {a.prompts} prompts x {a.group_size}, lr {a.lr:g}, seeds {', '.join(seeds)}"
    plot(a.out, every, Path(a.plot), title)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="runs/sft-tiny")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seeds", default="0", help="comma-separated run seeds")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--only", type=lambda s: s.split(","), help="comma-separated strategies to run (default: all); the summary covers every finished run in OUT")
    ap.add_argument("--out", type=Path, default=Path("runs/rollout-curves"))
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--plot", default="docs/rollouts_learning.png")
    ap.add_argument("--json", default="benchmarks/rollout_curves.json")
    args = ap.parse_args()
    if unknown := [n for n in args.only or [] if n not in RUNS]:
        ap.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
    main(args)
