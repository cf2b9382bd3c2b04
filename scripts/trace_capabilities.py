"""TRACE's recipe (covey.envs.trace, reconstructed, partial): from a run's episodes to one LoRA training
config per missing capability.

    python scripts/trace_capabilities.py --run runs/search --backend '{"kind": "openai", "model": "m", "base_url": "..."}' \
        --out runs/trace                      # a model names the capabilities (TRACE step 1)
    python scripts/trace_capabilities.py --run runs/search --capabilities caps.json --out runs/trace   # or give them
    covey train runs/trace/capability_0.yaml   # step 3: one LoRA adapter per capability (then _1, _2, ...)

It reads RUN/config.yaml and the episodes in RUN/samples.jsonl (`log.completions_every`; an episode succeeded
when its env_return is > 0), asks the model to contrast successful and failed ones, and writes for each
capability the run's config with `env` wrapped in `trace_provisional` (the base env plus a reward for the
capability's check) and `model.lora`. Routing tasks to adapters at inference (TRACE step 4) is not built.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from covey.envs.llm import Asker
from covey.envs.trace import check_capability, contrast
from covey.train.config import load_config


def capability_configs(config: dict, capabilities: list[dict], lora_r: int = 8, steps: int | None = None) -> list[dict]:
    """The run's config (a dict) once per capability: the env wrapped for the capability, LoRA on."""
    if not config.get("env"):
        raise ValueError("TRACE needs a run with an env (multi-turn episodes)")
    out = []
    for cap in capabilities:
        why = check_capability(cap)
        if why is not None:
            raise ValueError(f"capability {cap!r}: {why}")
        cfg = json.loads(json.dumps(config))
        base = {"name": cfg["env"]["name"], **(cfg["env"].get("params") or {})}
        cfg["env"] = {"name": "trace_provisional", "params": {"base": base, "capability": cap}}
        cfg["model"]["lora"] = {**(cfg["model"].get("lora") or {}), "r": lora_r}
        if steps is not None:
            cfg["steps"] = steps
        out.append(cfg)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a covey run folder with config.yaml and samples.jsonl")
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", help="the model that contrasts the episodes (a judge backend spec, JSON)")
    parser.add_argument("--capabilities", help="a JSON file of capabilities instead of asking a model")
    parser.add_argument("--max", type=int, default=3)
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    run = Path(args.run)
    config = load_config(run / "config.yaml").model_dump(mode="json")
    if args.capabilities:
        caps = json.loads(Path(args.capabilities).read_text())
    elif args.backend:
        episodes = []
        for line in (run / "samples.jsonl").read_text().splitlines():
            row = json.loads(line)
            if "episode" in row:
                episodes.append({"transcript": row["episode"], "success": row.get("rewards", {}).get("env_return", 0.0) > 0})
        caps, counts = contrast(Asker(json.loads(args.backend), 1024), episodes, args.max)
        print(json.dumps(counts))
    else:
        parser.error("give --backend (a model names the capabilities) or --capabilities FILE")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, cfg in enumerate(capability_configs(config, caps, args.lora_r, args.steps)):
        path = out / f"capability_{i}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        print(f"{cfg['env']['params']['capability']['name']}: covey train {path}")


if __name__ == "__main__":
    main()
