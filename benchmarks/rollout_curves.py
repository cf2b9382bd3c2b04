"""Short learning runs, one per rollout strategy, from the SFT-warmed tiny Llama on arithmetic; writes
the reward curves to docs/rollouts_learning.png and the numbers to a JSON file.

    covey sft --model tiny-llama --task arithmetic --out runs/sft-tiny   # once
    .venv/bin/python benchmarks/rollout_curves.py --model runs/sft-tiny --steps 20
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from covey.train.config import validate_config
from covey.train.trainer import Trainer

RUNS = {
    "group": ({"name": "group"}, {}),
    "treepo": ({"name": "treepo", "segment_tokens": 2}, {"advantage": {"name": "treepo"}}),
    "branch": ({"name": "branch", "segment_tokens": 1}, {"advantage": {"name": "branch_grpo"}}),
    "latr": ({"name": "latr", "tau_abs": 0.05, "tau_rel": 0.5, "filter_steps": [3], "tau_ed": 0.3}, {}),
    "april": ({"name": "april", "chunk_tokens": 2}, {"correction": {"name": "tis"}}),
    "igrpo": ({"name": "igrpo"}, {}),
    "cog_rethinker": ({"name": "cog_rethinker"}, {}),
    "arrol": ({"name": "arrol", "check_tokens": 3, "warmup_rows": 64}, {}),
    "tppo": ({"name": "tppo", "window_tokens": 4}, {"advantage": {"name": "tppo"}}),
}


def run(name: str, model: str, steps: int, seed: int, out: Path) -> list[float]:
    strategy, algo = RUNS[name]
    cfg = validate_config({
        "model": {"name": model, "dtype": "fp32"}, "task": {"name": "arithmetic"}, "seed": seed,
        "rollout": {"prompts_per_step": 8, "group_size": 8, "strategy": strategy},
        "sampling": {"temperature": 1.0, "max_new_tokens": 8}, "engine": {"dtype": "fp32"},
        "algo": {"preset": "grpo", "kl": None, **algo}, "optim": {"lr": 1e-4}, "reward_workers": 0,
        "log": {"progress": False, "tensorboard": False, "dir": str(out)}, "checkpoint": {"every": 0}, "steps": steps,
    })  # fmt: skip
    trainer = Trainer(cfg, out / name)
    key = "tppo/finished_reward" if name == "tppo" else "reward/mean"  # tppo's batch rows are mostly unfinished
    rewards = [float(trainer.step()[key]) for _ in range(steps)]
    trainer.close()
    return rewards


def main(a) -> None:
    torch.set_num_threads(1)
    results = json.loads(Path(a.json).read_text()) if a.only and Path(a.json).exists() else {}  # --only updates
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only or RUNS:
            t0 = time.perf_counter()
            results[name] = run(name, a.model, a.steps, a.seed, Path(tmp))
            print(json.dumps({"strategy": name, "seconds": round(time.perf_counter() - t0, 1), "reward": results[name]}), flush=True)
    Path(a.json).write_text(json.dumps(results, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        k = 3
        smooth = [sum(r[max(0, i - k + 1) : i + 1]) / len(r[max(0, i - k + 1) : i + 1]) for i in range(len(r))]
        ax.plot(range(1, len(r) + 1), smooth, label=name, lw=2 if name == "group" else 1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward (3-step moving average)")
    ax.set_title(f"tiny-llama (SFT-warmed) on arithmetic, 8 prompts x 8, seed {a.seed}")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="runs/sft-tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--plot", default="docs/rollouts_learning.png")
    ap.add_argument("--json", default="benchmarks/rollout_curves.json")
    main(ap.parse_args())
