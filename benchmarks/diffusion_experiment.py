"""Masked diffusion on CPU (docs/diffusion.md): diffu_grpo vs dlm_gdpo reward curves on tiny-llada
after a short SFT, and the variance of the sequence-likelihood estimators against the number of
forwards per estimate (GDPO's claim: quadrature over t beats Monte Carlo over t at equal budget).

    covey sft --model tiny-llada --task arithmetic --out runs/sft-tiny-llada --steps 150 --batch-size 16
    python benchmarks/diffusion_experiment.py --model runs/sft-tiny-llada --out runs/diffusion-exp
    python benchmarks/diffusion_experiment.py --model runs/sft-tiny-llada --out runs/diffusion-exp --length 64 --skip-curves

Writes OUT/curves.json (reward/mean per step per preset), OUT/variance-L<length>.json and the plot
(--plot, default docs/img/diffusion_experiment.png).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from covey.likelihood import LIKELIHOODS, model_canvas, row_seeds
from covey.models import apply_chat, load
from covey.tasks import get_task
from covey.train.config import validate_config
from covey.train.trainer import Trainer

PRESETS = ("diffu_grpo", "dlm_gdpo")
# estimator -> (params for a budget of f forwards, the budgets): equal forwards per estimate
ESTIMATORS = {
    "elbo_mc (t by MC, stratified counts)": ("elbo_mc", lambda f: {"mc_num": f}, (1, 2, 3, 4, 6)),
    "elbo_mc (t by MC, independent)": ("elbo_mc", lambda f: {"mc_num": f, "stratified": False}, (1, 2, 3, 4, 6)),
    "elbo_sdmc (t by Gauss-Legendre)": ("elbo_sdmc", lambda f: {"nodes": f}, (1, 2, 3, 4, 6)),
    "elbo_antithetic (ESPO)": ("elbo_antithetic", lambda f: {"num_mc": f // 2}, (2, 4, 6)),
    "elbo_double_mc (t ~ U(0,1), naive)": ("elbo_double_mc", lambda f: {"mc_num": f}, (1, 2, 3, 4, 6)),
}


def config(model: str, preset: str, steps: int, out: Path, seed: int, prompts: int, group: int) -> dict:
    return {
        "model": {"name": model, "family": "masked_diffusion", "dtype": "fp32"},
        "engine": {"name": "masked_diffusion", "block_length": 4, "steps": 8},
        "task": {"name": "arithmetic"}, "sampling": {"temperature": 1.0, "max_new_tokens": 8},
        "rollout": {"prompts_per_step": prompts, "group_size": group}, "algo": {"preset": preset},
        "optim": {"lr": 3e-4}, "reward_workers": 0, "threads": 1, "steps": steps, "seed": seed,
        "log": {"dir": str(out), "name": f"{preset}-s{seed}", "progress": False, "report_to": ["jsonl"]},
    }  # fmt: skip


def curves(args) -> dict:
    out = {}
    for preset in PRESETS:
        t0 = time.time()
        trainer = Trainer(validate_config(config(args.model, preset, args.steps, args.out, args.seed, args.prompts, args.group)), args.out / f"{preset}-s{args.seed}")
        try:
            out[preset] = [trainer.step()["reward/mean"] for _ in range(args.steps)]
        finally:
            trainer.close()
        print(preset, [round(r, 3) for r in out[preset]], f"{time.time() - t0:.0f}s", flush=True)
    return out


@torch.no_grad()
def variance(args) -> dict:
    """Per sequence, the variance over `--repeats` independent mask draws; averaged over sequences."""
    model, tok = load(args.model)
    task = get_task("arithmetic")
    items = list(task.examples("test"))[: args.sequences]
    prompts = [torch.tensor(apply_chat(tok, it["prompt"])) for it in items]
    eos = tok.eos_token_id
    length = args.length
    comp = torch.tensor([(tok.encode(it["answer"], add_special_tokens=False) + [eos] * length)[:length] for it in items])
    base = row_seeds(prompts, comp, None)
    reps = args.repeats
    rows_p = [p for p in prompts for _ in range(reps)]
    rows_c = comp.repeat_interleave(reps, 0)
    out = {}
    for label, (name, params, budgets) in ESTIMATORS.items():
        if args.estimators and not any(x in label for x in args.estimators.split(",")):
            continue
        out[label] = {}
        for f in budgets:
            seeds = [base[i] * 1000 + r for i in range(len(items)) for r in range(reps)]
            est = LIKELIHOODS.get(name).bind(params(f))(model_canvas(model, tok, rows_p, rows_c, seeds)).token_logp[:, 0] * length
            per_seq = est.view(len(items), reps)
            out[label][f] = {"var": float(per_seq.var(1).mean()), "mean": float(per_seq.mean())}
            print(label, f, out[label][f], flush=True)
    return out


def plot(curves_: dict, variances: dict[int, dict], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(variances), figsize=(5 * (1 + len(variances)), 3.8))
    a = axes[0]
    for preset, rs in curves_.items():
        a.plot(range(1, len(rs) + 1), rs, marker="o", label=preset)
    a.set(xlabel="step", ylabel="reward/mean (accuracy)", title="tiny-llada after SFT, arithmetic")
    a.legend()
    for b, (length, var) in zip(axes[1:], sorted(variances.items())):
        for label, by in var.items():
            fs = sorted(by, key=int)
            b.plot([int(f) for f in fs], [by[f]["var"] for f in fs], marker="o", label=label)
        b.set(xlabel="forwards per estimate", ylabel="variance of the sequence ELBO", yscale="log",
              title=f"estimator variance, canvas L = {length}")
        b.legend(fontsize=7)
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="runs/sft-tiny-llada")
    p.add_argument("--out", type=Path, default=Path("runs/diffusion-exp"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group", type=int, default=4, help="completions per prompt")
    p.add_argument("--sequences", type=int, default=6)
    p.add_argument("--repeats", type=int, default=32)
    p.add_argument("--length", type=int, default=8, help="canvas length of the variance measurement")
    p.add_argument("--skip-curves", action="store_true")
    p.add_argument("--skip-variance", action="store_true")
    p.add_argument("--estimators", default="", help="comma list of substrings: only these (merged into the saved file)")
    p.add_argument("--plot", type=Path, default=Path("docs/img/diffusion_experiment.png"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if not args.skip_variance:
        dest = args.out / f"variance-L{args.length}.json"
        saved = json.loads(dest.read_text()) if args.estimators and dest.exists() else {}
        dest.write_text(json.dumps({**saved, **variance(args)}, indent=1))
    path = args.out / "curves.json"
    if args.skip_curves:
        cur = json.loads(path.read_text()) if path.exists() else {}
    else:
        cur = curves(args)
        path.write_text(json.dumps(cur, indent=1))
    found = {int(f.stem.split("-L")[1]): json.loads(f.read_text()) for f in args.out.glob("variance-L*.json")}
    plot(cur, found, args.plot)
    print({k: round(statistics.mean(v[-3:]) - statistics.mean(v[:3]), 3) for k, v in cur.items() if len(v) >= 3})


if __name__ == "__main__":
    main()
