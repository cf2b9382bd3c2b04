"""Tree rollouts (`treepo`) vs i.i.d. sampling (`group`) at an equal number of completed leaves.

For P prompts x G leaves each, runs `TorchEngine.generate(prompts, G)` (i.i.d.) and TreePO's
`grow_trees` (segment-wise branching on a forking KV cache) on the same model, alternating them so
both see the same machine load. Prints one JSON line per setting: decoded tokens per leaf (tokens
sampled, i.e. decode forward passes; a shared prefix counts once), prefill tokens, the
distinct-trajectory ratio (distinct completions / leaves, per prompt), wall time, and the saving
1 - tree/iid. Prompts: GSM8K test questions under the model's chat template (tiny models: the
question text, their char tokenizer has no template).

    .venv/bin/python benchmarks/bench_tree.py --model tiny-llama --group 16 --new-tokens 64 --segment 16
    .venv/bin/python benchmarks/bench_tree.py --model smollm2-135m-instruct --prompts 4 --group 8 --new-tokens 128 --segment 32
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import apply_chat, load
from covey.strategies.treepo import grow_trees

GSM8K = "/work/shared/data/gsm8k/test.jsonl"


def _prompts(tok, k: int) -> list[list[int]]:
    with open(GSM8K) as f:
        qs = [json.loads(line)["question"] for _, line in zip(range(k), f)]
    if getattr(tok, "chat_template", None):
        return [list(apply_chat(tok, [{"role": "user", "content": q}])) for q in qs]
    return [tok(q[:120])["input_ids"] for q in qs]


def _distinct(token_lists: list[tuple[int, tuple]]) -> float:
    return len(set(token_lists)) / max(len(token_lists), 1)


def run(a) -> list[dict]:
    torch.set_num_threads(a.threads)
    model, tok = load(a.model)
    engine = TorchEngine(model, tok, dtype=a.dtype)
    prompts = _prompts(tok, a.prompts)
    out = []
    for rep in range(a.repeats):
        sp = SamplingParams(seed=rep, max_new_tokens=a.new_tokens, temperature=a.temperature, ignore_eos=a.ignore_eos)
        t0 = time.perf_counter()
        gen = engine.generate(prompts, a.group, sp)
        t_iid = time.perf_counter() - t0
        lens = gen.lengths
        iid_rows = [(int(p), tuple(r[:n].tolist())) for p, r, n in zip(gen.prompt_index, gen.completion_ids, lens)]
        t0 = time.perf_counter()
        leaves, m = grow_trees(engine, sp, prompts, [a.group] * len(prompts), a.segment, a.width,
                               (a.first_min, a.first_max), None, True)  # fmt: skip
        t_tree = time.perf_counter() - t0
        iid_per_leaf = float(lens.sum()) / len(lens)
        row = {
            "model": a.model, "repeat": rep, "prompts": len(prompts), "group": a.group, "new_tokens": a.new_tokens,
            "segment": a.segment, "width": a.width, "first": [a.first_min, a.first_max], "leaves": len(leaves),
            "iid_decoded_per_leaf": round(iid_per_leaf, 2), "tree_decoded_per_leaf": round(m["tree/decoded_per_leaf"], 2),
            "saving": round(1 - m["tree/decoded_per_leaf"] / iid_per_leaf, 4),
            "tree_decoded_per_leaf_token": round(m["tree/decoded_tokens"] / sum(len(r.tokens) for r in leaves), 4),
            "iid_prefill_tokens": sum(len(p) for p in prompts), "tree_prefill_tokens": int(m["tree/prefill_tokens"]),
            "iid_mean_len": round(iid_per_leaf, 2), "tree_mean_len": round(sum(len(r.tokens) for r in leaves) / len(leaves), 2),
            "iid_distinct": round(_distinct(iid_rows), 4),
            "tree_distinct": round(_distinct([(r.payload[0], tuple(r.tokens)) for r in leaves]), 4),
            "tree_fallback_rows": int(m["tree/fallback_rows"]),
            "iid_seconds": round(t_iid, 3), "tree_seconds": round(t_tree, 3),
            "loadavg": os.getloadavg()[0],
        }  # fmt: skip
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--segment", type=int, default=16)
    ap.add_argument("--width", type=int, default=2)
    ap.add_argument("--first-min", type=int, default=2)
    ap.add_argument("--first-max", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    run(ap.parse_args())
