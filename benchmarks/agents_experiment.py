"""Step-level credit on the maze: GRPO vs GiGPO vs HGPO vs EMPG at equal compute (docs/agents.md).

Every method trains the same warm-started policy (`covey sft` on the maze task's shortest plans) with
the same episodes per step and the same number of steps, so each sees the same number of episodes;
the x axis is environment steps (turns played), which differs between methods as episodes end early
when the goal is reached. Logged per training step: env steps so far, the training episodes' success
rate, invalid-action rate and mean length, and every `--eval-every` steps the held-out success rate
(one greedy episode per held-out maze, `covey.eval.episodes`).

    covey sft --model tiny-llama --task maze --task-param size=3 --task-param wall_density=0.2 --out runs/sft-maze
    python benchmarks/agents_experiment.py --model runs/sft-maze --out runs/agents-exp --seeds 0,1 --steps 12 --eval-every 4
    python benchmarks/agents_experiment.py --model runs/sft-maze --out runs/agents-exp --seeds 0,1 --steps 12 --eval-every 4 --methods empg
    python benchmarks/agents_experiment.py --plot-only --out runs/agents-exp --plot docs/img/agents_maze.png

Writes OUT/seed<k>/<method>.jsonl (one row per step), OUT/summary.json, OUT/table.md and the plot
(the table in docs/agents.md: 12 steps, held-out every 4; a run of one method adds its rows to an
OUT that holds the others', and --plot-only redraws the table and plot over all of them).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from _runs import load_seeds, seed_mean, write_rows, write_summary
from covey.eval.episodes import evaluate_episodes
from covey.strategies import STRATEGIES
from covey.train.config import validate_config
from covey.train.trainer import Trainer

METHODS: dict[str, dict] = {
    "grpo": {"advantage": {"name": "grpo"}},
    "gigpo": {"advantage": {"name": "gigpo"}},  # gamma 0.95, omega 1, mean_norm (the paper's defaults)
    "hgpo": {"advantage": {"name": "hgpo"}},
    "empg": {"advantage": {"name": "empg"}},  # k 1, k_f 1, zeta 0.1
}


def config(model: str, method: str, seed: int, args) -> dict:
    return {
        "model": {"name": model, "dtype": "fp32"},
        "engine": {"dtype": "fp32"},
        "task": {"name": "maze", "params": {"size": 3, "wall_density": 0.2, "n_train": 64, "n_test": args.n_test}},
        "env": {"name": "maze", "max_steps": args.max_turns},
        "sampling": {"temperature": 1.0, "max_new_tokens": args.max_new_tokens},
        "rollout": {"prompts_per_step": args.prompts, "group_size": args.group,
                    "strategy": {"name": "episodes", "max_turns": args.max_turns, "max_invalid": 3}},  # fmt: skip
        "algo": {"preset": "grpo", "kl": None, **METHODS[method]},
        "optim": {"lr": args.lr},
        "reward_workers": 0,
        "log": {"progress": False, "report_to": ["jsonl"]},
        "steps": args.steps,
        "seed": seed,
    }


def run(method: str, seed: int, args) -> list[dict]:
    out = args.out / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    cfg = validate_config(config(args.model, method, seed, args))
    trainer = Trainer(cfg, out / "runs" / method)
    eval_items = list(trainer.task.examples("test"))
    episodes = STRATEGIES.build("episodes", {**cfg.rollout.strategy.params, "env": {"name": "maze", **cfg.env.params}})

    def held_out() -> float:
        return evaluate_episodes(trainer.engine, trainer.tokenizer, episodes, eval_items, max_new_tokens=args.max_new_tokens)["accuracy"]

    rows = [{"step": 0, "env_steps": 0, "eval_success": held_out()}]
    env_steps, t0 = 0.0, time.perf_counter()
    try:
        while trainer.step_num < args.steps:
            m = trainer.step()
            kept = m["episodes/count"] - m["episodes/failed"]
            env_steps += m.get("episodes/length_mean", 0.0) * kept
            row = {"step": trainer.step_num, "env_steps": env_steps, "success": m.get("episodes/success_rate", 0.0),
                   "invalid": m["episodes/invalid_action_rate"], "length": m.get("episodes/length_mean", 0.0),
                   "adv_std": m.get("adv/std", 0.0), "seconds": time.perf_counter() - t0}  # fmt: skip
            if trainer.step_num % args.eval_every == 0 or trainer.step_num == args.steps:
                row["eval_success"] = held_out()
            rows.append(row)
            print(method, seed, json.dumps(row), flush=True)
    finally:
        trainer.close()
    write_rows(out / f"{method}.jsonl", rows)
    return rows


def summarise(out: Path, methods: list[str]) -> str:
    """Markdown table: training success in the first and last 5 steps, held-out success at the start and end."""
    lines = ["| method | seeds | steps | env steps | train success, steps 1-5 | last 5 steps | held-out success start | end (per seed) | seconds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    summary = {}
    for method in methods:
        runs = load_seeds(out, method)
        if not runs:
            continue
        per = []
        for rows in runs:
            steps = [r for r in rows if r["step"] > 0]
            ev = [r["eval_success"] for r in rows if "eval_success" in r]
            per.append({"steps": len(steps), "env_steps": steps[-1]["env_steps"], "first5": sum(r["success"] for r in steps[:5]) / 5,
                        "last5": sum(r["success"] for r in steps[-5:]) / 5, "eval_start": ev[0], "eval_end": ev[-1],
                        "seconds": steps[-1]["seconds"]})  # fmt: skip
        mean = seed_mean(per)
        summary[method] = {"mean": mean, "per_seed": per}
        ends = ", ".join(f"{p['eval_end']:.0%}" for p in per)
        lines.append(f"| {method} | {len(per)} | {mean['steps']:.0f} | {mean['env_steps']:.0f} | {mean['first5']:.1%} | {mean['last5']:.1%} | "
                     f"{mean['eval_start']:.0%} | {mean['eval_end']:.0%} ({ends}) | {mean['seconds']:.0f} |")  # fmt: skip
    return write_summary(out, summary, lines)


def plot(out: Path, methods: list[str], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, method in enumerate(methods):
        for j, rows in enumerate(load_seeds(out, method)):
            steps = [r for r in rows if r["step"] > 0]
            k = 3  # moving average over 3 steps
            s = [r["success"] for r in steps]
            smooth = [sum(s[max(0, t - k + 1) : t + 1]) / len(s[max(0, t - k + 1) : t + 1]) for t in range(len(s))]
            label = method if j == 0 else None
            style = "-" if j == 0 else "--"
            ax1.plot([r["env_steps"] for r in steps], smooth, f"C{i}{style}", alpha=0.85, label=label)
            ev = [r for r in rows if "eval_success" in r]
            ax2.plot([r["env_steps"] for r in ev], [r["eval_success"] for r in ev], f"C{i}{style}", marker=".", alpha=0.85, label=label)
    ax1.set(xlabel="environment steps", ylabel="training episodes solved (3-step mean)", title="maze 3x3: training success")
    ax2.set(xlabel="environment steps", ylabel="held-out mazes solved (greedy)", title="held-out success (solid seed 0, dashed seed 1)")
    ax1.legend()
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="runs/sft-maze")
    p.add_argument("--out", type=Path, default=Path("runs/agents-exp"))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--prompts", type=int, default=4, help="mazes per step")
    p.add_argument("--group", type=int, default=4, help="episodes per maze")
    p.add_argument("--max-turns", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--n-test", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seeds", default="0")
    p.add_argument("--plot", type=Path, default=None, help="where to save the plot (default OUT/agents_maze.png)")
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args()
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown method {unknown[0]!r}; methods are {', '.join(METHODS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not args.plot_only:
        for seed in [int(x) for x in args.seeds.split(",")]:
            for method in methods:
                run(method, seed, args)
    print(summarise(args.out, methods))
    plot(args.out, methods, args.plot or args.out / "agents_maze.png")


if __name__ == "__main__":
    main()
