"""Build the offline step data of `direct_advantage_provisional` and train its critic.

    python scripts/direct_advantage_data.py --model runs/sft-tiny --task arithmetic --out runs/da-data \
        --items 64 --k 4 --mc 4 --max-states 4 --max-new-tokens 32

writes OUT/steps.jsonl (one row per state: prompt, prefix, candidates, advantages, the item's columns) and
OUT/critic.pt (the fitted `ValueCritic`), then prints the builder's metrics. Train on the data with
examples/tiny/direct_advantage.yaml (task: dataset, path OUT/steps.jsonl). `covey.objectives.step_data`
documents each stage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the policy that samples (pi_ref): a name or a run's exported folder")
    ap.add_argument("--critic-model", default=None, help="the critic's base model (default: --model)")
    ap.add_argument("--task", required=True)
    ap.add_argument("--task-param", action="append", default=[], help="key=value (YAML value)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", required=True)
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="candidate steps per state")
    ap.add_argument("--mc", type=int, default=4, help="Monte-Carlo continuations per state value")
    ap.add_argument("--max-states", type=int, default=4)
    ap.add_argument("--sep", default="\n", help="the step separator")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--critic-steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    import yaml

    from covey.engine import SamplingParams, TorchEngine
    from covey.models import load
    from covey.objectives.critic import ValueCritic
    from covey.objectives.step_data import build_step_data, task_verifier
    from covey.tasks import get_task

    params = {}
    for kv in a.task_param:
        key, _, val = kv.partition("=")
        params[key] = yaml.safe_load(val)
    task = get_task(a.task, **params)
    items = task.examples(a.split)[: a.items]
    model, tok = load(a.model)
    engine = TorchEngine(model.float().eval(), tok, dtype="fp32")
    critic = ValueCritic.from_name(a.critic_model or a.model, seed=a.seed)
    sampling = SamplingParams(temperature=a.temperature, max_new_tokens=a.max_new_tokens, seed=a.seed)
    rows, metrics = build_step_data(engine, tok, critic, items, task_verifier(task), sampling=sampling, k=a.k, mc=a.mc,
                                    max_states=a.max_states, sep=a.sep, critic_steps=a.critic_steps, seed=a.seed)  # fmt: skip
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "steps.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    critic.save(out / "critic.pt")
    print(json.dumps({"out": str(out), **metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
