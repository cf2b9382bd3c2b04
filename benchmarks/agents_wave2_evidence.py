"""Small-scale evidence for the second wave of agent methods (docs/agents.md, "Evidence"), one claim per family,
measured on SmolLM2-135M-Instruct's own rollouts (no training unless said):

    egrpo     E-GRPO in agent episodes: on the same search_qa episodes, how many groups carry a learning signal
              (rewards not all equal) under the exact-match reward and under entity_match over the retrieved
              documents
    trace     TRACE: the same for the capability reward "search before answering" on search_qa
    starling  STARLING: the share of each held-out generated game's goal SmolLM2 reaches, sampled
    ui_s1     UI-S1: on the same gui_sim episodes (semi-online, patched), the groups with a nonzero advantage
              under ui_s1 (step scores + discounted returns) and under grpo on the episode return
    tfgrpo    Training-Free GRPO: two steps with SmolLM2 as its own updater on 1-digit sums of two numbers
              (easy enough that some groups are partly right, the only groups it learns from); which stages
              gave usable replies, the library, the weights (unchanged)

    python benchmarks/agents_wave2_evidence.py --out runs/wave2 --only egrpo,trace,starling,ui_s1,tfgrpo

docs/agents.md ("Evidence: the second wave") ran egrpo with --prompts 8 --batches 2, trace and ui_s1 with
--prompts 4 --batches 1, starling as is, tfgrpo with --prompts 4 --batches 2, OMP_NUM_THREADS=1.

Writes OUT/<name>.json; prints one line per measurement. Seeds fixed (--seed); CPU, bf16 or fp32 as `dtype: auto`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from covey.algos import ADVANTAGES
from covey.train.config import validate_config
from covey.train.trainer import Trainer

MODEL = "smollm2-135m-instruct"


def _base(seed: int, model: str = MODEL) -> dict:
    return {"model": {"name": model}, "reward_workers": 0, "seed": seed, "log": {"progress": False, "report_to": ["jsonl"]},
            "algo": {"preset": "grpo", "kl": None}, "steps": 1}  # fmt: skip


def _collect(cfg: dict, run_dir: Path, batches: int):
    trainer = Trainer(validate_config(cfg), run_dir)
    try:
        out = []
        for b in range(batches):
            batch, metrics = trainer.collect(step=b)
            out.append((batch, metrics))
        return out, trainer
    finally:
        trainer.close()


def _signal(values: torch.Tensor, groups: torch.Tensor) -> float:
    """The share of groups whose values are not all equal."""
    ids = groups.unique()
    return sum(float(values[groups == g].max() - values[groups == g].min() > 1e-9) for g in ids) / len(ids)


def egrpo(args) -> dict:
    cfg = {**_base(args.seed, args.model), "task": {"name": "search_qa", "params": {"n_entities": 200, "seed": 0}}, "task_reward_weight": 0.0,
           "rewards": [{"name": "entity_match", "params": {"evidence_column": "retrieved", "answer_tag": False}}],
           "env": {"name": "search_qa", "k": 2, "max_calls": 2}, "sampling": {"temperature": 1.0, "max_new_tokens": 48},
           "rollout": {"prompts_per_step": args.prompts, "group_size": 4,
                       "strategy": {"name": "episodes", "max_turns": 3, "rewards": "functions"}}}  # fmt: skip
    batches, _ = _collect(cfg, args.out / "egrpo", args.batches)
    rows = []
    for batch, m in batches:
        first = _first_rows(batch)
        sub = batch.select(first)
        acc, ent = sub.reward("accuracy"), sub.reward("entity_match")
        retrieved = [float(any(it["answer"] in d for d in it.get("retrieved", []))) for it in sub.items]
        searched = [float(bool(it.get("retrieved"))) for it in sub.items]
        rows.append({"episodes": len(first), "accuracy": float(acc.mean()), "entity_match": float(ent.mean()),
                     "signal_accuracy": _signal(acc, sub.group), "signal_entity_match": _signal(ent, sub.group),
                     "retrieved_answer_doc": sum(retrieved) / len(retrieved), "searched": sum(searched) / len(searched),
                     "seconds_generate": m.get("time/generate")})  # fmt: skip
    return _mean(rows)


def trace(args) -> dict:
    cap = {"name": "search first", "check": {"kind": "tool_before_answer", "tool": "search"}}
    cfg = {**_base(args.seed, args.model), "task": {"name": "search_qa", "params": {"n_entities": 200, "seed": 0}},
           "env": {"name": "trace_provisional", "base": {"name": "search_qa", "k": 2, "max_calls": 2}, "capability": cap,
                   "capability_weight": 1.0, "base_weight": 1.0},
           "sampling": {"temperature": 1.0, "max_new_tokens": 48},
           "rollout": {"prompts_per_step": args.prompts, "group_size": 4, "strategy": {"name": "episodes", "max_turns": 3}}}  # fmt: skip
    batches, _ = _collect(cfg, args.out / "trace", args.batches)
    rows = []
    for batch, _m in batches:
        sub = batch.select(_first_rows(batch))
        total = sub.reward("env_return")  # base (exact match) + capability
        correct = torch.tensor([float(it.get("episode_success") or 0) for it in sub.items])
        capability = total - correct
        rows.append({"episodes": len(sub), "capability_rate": float(capability.mean()), "accuracy": float(correct.mean()),
                     "signal_accuracy": _signal(correct, sub.group), "signal_capability": _signal(capability, sub.group),
                     "signal_both": _signal(total, sub.group)})  # fmt: skip
    return _mean(rows)


def starling(args) -> dict:
    cfg = {**_base(args.seed, args.model), "task": {"name": "starling_provisional", "params": {"n_test": 8}, "split": "test"},
           "env": {"name": "starling_provisional", "max_steps": 8}, "sampling": {"temperature": 1.0, "max_new_tokens": 16},
           "rollout": {"prompts_per_step": 8, "group_size": 2, "strategy": {"name": "episodes", "max_turns": 8, "max_invalid": 4}}}  # fmt: skip
    batches, _ = _collect(cfg, args.out / "starling", 1)
    batch, m = batches[0]
    sub = batch.select(_first_rows(batch))
    goal = sub.reward("env_return")
    return {"episodes": len(sub), "goal_share_mean": float(goal.mean()), "solved": float((goal >= 1 - 1e-9).float().mean()),
            "any_progress": float((goal > 0).float().mean()), "invalid_action_rate": m["episodes/invalid_action_rate"]}  # fmt: skip


def ui_s1(args) -> dict:
    """The same warm policy and seeds with the patch module (patch_threshold 2, UI-S1's script) and without it
    (0: the episode ends at the first mismatch, plain online RL on the replay): which turn positions the
    episodes reach, and the groups with signal under ui_s1 and under grpo on the episode return."""
    out = {}
    for patches in (2, 0):
        cfg = {**_base(args.seed, args.model), "task": {"name": "gui_sim", "params": {"n_train": 64, "n_test": 8}},
               "env": {"name": "gui_sim", "patch_threshold": patches}, "sampling": {"temperature": 1.0, "max_new_tokens": 40},
               "rollout": {"prompts_per_step": args.prompts, "group_size": 4,
                           "strategy": {"name": "episodes", "max_turns": 6, "layout": "per_step", "max_context_tokens": 2048}}}  # fmt: skip
        batches, _ = _collect(cfg, args.out / f"ui_s1_patch{patches}", args.batches)
        rows = []
        for batch, m in batches:
            uis1 = ADVANTAGES["ui_s1"].bind({})(batch)
            grpo = ADVANTAGES["grpo"].bind({})(batch)
            eps = batch.select(_first_rows(batch))
            matched = [x for v in eps.step_valid for x in v]
            lengths = [len(v) for v in eps.step_valid]
            rows.append({"episodes": len(eps), "turns_per_episode": sum(lengths) / len(lengths),
                         "turns_past_first": sum(max(n - 1, 0) for n in lengths) / len(lengths),
                         "matched_actions": sum(matched) / max(len(matched), 1),
                         "matched_past_first": sum(x for v in eps.step_valid for x in v[1:]) / len(lengths),
                         "signal_grpo": 1 - grpo.metrics["adv/zero_signal_groups"],
                         "signal_ui_s1": 1 - uis1.metrics["adv/zero_signal_groups"],
                         "success": m.get("episodes/success_rate", 0.0)})  # fmt: skip
        out[f"patch_threshold_{patches}"] = _mean(rows)
    return out


def tfgrpo(args) -> dict:
    cfg = {**_base(args.seed, args.model), "task": {"name": "arithmetic", "params": {"digits": 1, "operands": 2, "n_train": 64, "n_test": 16}},
           "sampling": {"temperature": 0.7, "max_new_tokens": 64}, "steps": args.batches,
           "rollout": {"prompts_per_step": args.prompts, "group_size": 5,
                       "strategy": {"name": "training_free_grpo", "num_experiences": 1, "max_new_tokens": 256,
                                    "given_ground_truth": True}}}  # fmt: skip
    trainer = Trainer(validate_config(cfg), args.out / "tfgrpo")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    try:
        rows = [trainer.step() for _ in range(args.batches)]
        library = dict(trainer.strategy.library)
        same = all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    finally:
        trainer.close()
    keys = [k for k in rows[0] if k.startswith("tfgrpo/")] + ["reward/mean"]
    return {"steps": [{k: r.get(k) for k in keys} for r in rows], "library": library, "weights_unchanged": same}


def _first_rows(batch) -> list[int]:
    seen: dict[int, int] = {}
    for i, e in enumerate(batch.episode.tolist()):
        seen.setdefault(e, i)
    return list(seen.values())


def _mean(rows: list[dict]) -> dict:
    return {k: sum(r[k] for r in rows if r[k] is not None) / len(rows) for k in rows[0]} | {"batches": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="egrpo,trace,starling,ui_s1,tfgrpo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--model", default=MODEL, help="the policy (e.g. a warm start from covey sft)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        t0 = time.perf_counter()
        result = globals()[name](args)
        result["wall_seconds"] = round(time.perf_counter() - t0, 1)
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
        print(name, json.dumps(result, default=str)[:1500], flush=True)


if __name__ == "__main__":
    main()
