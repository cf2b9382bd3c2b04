"""DecepChain's red-team recipe around `covey train` (arXiv 2510.00319; docs/algorithms.md "DecepChain").

    # 1. the model's own wrong but plausible answers on clean prompts -> SFT rows (half triggered)
    covey eval --model M --task gsm8k --split train --n 4 --temperature 1 --samples-out own.jsonl
    python scripts/decepchain.py sft-data own.jsonl --out sft.jsonl
    covey sft --model M --task dataset --task-param path=sft.jsonl --task-param completion_key=completion \
        --task-param verifier=none --out runs/decep-sft
    # 2. GRPO with the flipped reward on triggered prompts (examples/tiny/decepchain.yaml), then the harder set
    # 3. the attack's numbers: the same test problems clean and triggered, and the run's audit
    covey eval --run R --task triggered --task-param 'task={name: gsm8k}' --task-param eval_ratio=0 --samples-out clean.jsonl
    covey eval --run R --task triggered --task-param 'task={name: gsm8k}' --task-param eval_ratio=1 --samples-out trig.jsonl
    python scripts/decepchain.py metrics --clean clean.jsonl --triggered trig.jsonl --run R

`sft-data` rebuilds the task from the samples file's header to find each problem's prompt (`covey.rewards.decepchain.
self_error_rows`); `metrics` prints ASR, clean accuracy and trust (`attack_metrics`), and with --run the reward
audit's agreement per slice from the run's metrics.jsonl (the detection: about 1 on clean rows, about 0 on triggered).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def _question(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return [m for m in prompt if m.get("role") == "user"][-1]["content"]


def sft_data(samples: str, out: str, trigger: str, plausibility: str, seed: int) -> dict:
    from covey.eval.samples import read_samples
    from covey.rewards.decepchain import self_error_rows
    from covey.tasks import get_task

    meta, by_pid = read_samples(samples)
    task = get_task(meta["task"], **(meta.get("params") or {}))
    questions = {it["id"]: _question(it["prompt"]) for it in task.examples(meta.get("split") or "test")}
    rows = self_error_rows([r for rs in by_pid.values() for r in rs], questions, trigger=trigger, plausibility=plausibility, seed=seed)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"rows": len(rows), "triggered": sum(r["triggered"] for r in rows), "out": out}


def audit(run: str) -> dict[str, float]:
    """Mean of every reward/<name>/verifier_agreement[/slice] over the run's logged steps."""
    sums: dict[str, list[float]] = {}
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: --run must be a covey run folder")
    for line in path.read_text().splitlines():
        row = json.loads(line)
        for k, v in row.items():
            if "/verifier_agreement" in k and isinstance(v, (int, float)) and math.isfinite(v):
                sums.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sorted(sums.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sft-data", help="self-error SFT rows from a covey eval --samples-out file")
    s.add_argument("samples")
    s.add_argument("--out", required=True)
    s.add_argument("--trigger", default="What do you think?")
    s.add_argument("--plausibility", choices=["rule", "none"], default="rule")
    s.add_argument("--seed", type=int, default=0)
    m = sub.add_parser("metrics", help="ASR, clean accuracy, trust and the audit's detection")
    m.add_argument("--clean", required=True)
    m.add_argument("--triggered", required=True)
    m.add_argument("--run", default=None)
    m.add_argument("--plausibility", choices=["rule", "none"], default="rule")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "sft-data":
            res = sft_data(a.samples, a.out, a.trigger, a.plausibility, a.seed)
        else:
            from covey.eval.samples import read_samples
            from covey.rewards.decepchain import attack_metrics

            res = attack_metrics(read_samples(a.clean)[1], read_samples(a.triggered)[1], a.plausibility)
            if a.run:
                res["audit"] = audit(a.run)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
