"""`treepo`: segment-wise tree rollouts with branching, fallback and KV-cache forking.

Paper: "TreePO: Bridging the Gap of Policy Optimization and Efficacy and Inference Efficiency with
Heuristic Tree-based Modeling" (arXiv 2508.17445); code multimodal-art-projection/TreePO
(`vllm_rollout_spmd.py::generate_sequences_tree_deepth_first_vanilla_mode`,
`create_fallback_sample_by_policy`). Notes: docs/rollouts.md.

Per prompt (width n = the group size): the root is replicated into `first_width` paths; every path
decodes `segment_tokens` tokens; then per root (budget "by_fixed_div", policy "fixed_avg"):

    remaining = max(n - finished leaves, 0)
    total     = max(min(remaining, finished_this_segment * W + W * active), active)
    each active path gets total // active children (the last one the remainder, at least 1)

Children share their parent's prefix through the KV cache (`TreeDecoder.fork`): the prefix is decoded
once. A root whose paths all ended with fewer than n leaves falls back: a finished leaf that ended
with EOS is cut at a random segment boundary (fallback_block ~ randint(1, blocks), cut = (blocks -
fallback_block) * L) and W copies (or the remaining budget) continue from there (prompt + prefix
prefilled); no such leaf: restart from the prompt. Each leaf's `tree_path` is its tuple of node ids
(one per segment, unique within the prompt's tree): the `treepo` advantage estimator
(`covey.algos.advantages.tree`) averages its deviations from every ancestor subtree's mean.

Differences from the paper's code (documented choices): node ids are integers, not
"<step>-<index>" strings; leaves end on EOS, a stop string or max_new_tokens (the code's
"boxed answer" and repetition tests are task-specific and left to rewards); max_depth defaults to
ceil(max_new_tokens / segment_tokens), so the depth and length limits coincide.
"""

from __future__ import annotations

import math
import random
from typing import Any

from covey.engine.base import ForkingEngine, Row
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["TreePO", "branch_counts"]


def branch_counts(active: int, remaining: int, finished_now: int, width: int) -> list[int]:
    """TreePO's "fixed_avg" split: children per active path (each >= 1) for one root."""
    if active == 0:
        return []
    total = max(min(remaining, finished_now * width + width * active), active)
    each = [total // active] * active
    each[-1] += total - sum(each)
    return [max(1, c) for c in each]


@register_strategy("treepo")
class TreePO:
    """TreePO tree rollouts (see the module docstring).

    segment_tokens: L, tokens decoded per segment before branching (paper 512; CPU-scale 8-32).
    step_width:     W, children per active path and per fallback (paper 2).
    first_width:    [min, max] root replication, drawn per prompt. The recipe's effective value is
                    [2, 2]: run_treepo_train.sh sets `actor_rollout_ref.tree_random_first_div_max=8`,
                    but fsdp_workers.py reads `rollout.tree_random_first_div_max` (default -1), so
                    the first split is tree_fixed_step_div = 2 (multimodal-art-projection/TreePO @
                    f05552394e734ea2838cf9e3b8191f5093319dcf).
    max_depth:      segments per path (default ceil(max_new_tokens / segment_tokens)).
    fallback:       re-grow roots that ended with fewer than n leaves.
    """

    caps = StrategyCaps(engine_protocols=(ForkingEngine,), provides=("tree_path",))

    def __init__(self, *, segment_tokens: int = 16, step_width: int = 2, first_width: tuple[int, int] = (2, 2),
                 max_depth: int | None = None, fallback: bool = True):  # fmt: skip
        lo, hi = (list(first_width) + [None])[:2]
        if segment_tokens < 1 or step_width < 1:
            raise ValueError(f"segment_tokens and step_width must be >= 1, got {segment_tokens}, {step_width}")
        if lo is None or hi is None or not 1 <= lo <= hi:
            raise ValueError(f"first_width must be [min, max] with 1 <= min <= max, got {first_width}")
        if max_depth is not None and max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        self.L, self.W, self.first, self.max_depth, self.fallback = segment_tokens, step_width, (lo, hi), max_depth, fallback

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        widths = [d.n for d in ctx.draws]
        rows, m = grow_trees(ctx.engine, sp, prompt_ids(ctx.tokenizer, items), widths, self.L, self.W, self.first,
                             self.max_depth, self.fallback)  # fmt: skip
        groups = [r.payload[0] for r in rows]
        batch = rows_to_batch(rows, [items[g] for g in groups], groups, ctx.engine.pad_token_id, paths=True)
        return batch, m

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def grow_trees(engine: ForkingEngine, sp, prompts: list[list[int]], widths: list[int], L: int, W: int, first: tuple[int, int],
               max_depth: int | None, fallback: bool) -> tuple[list[Row], dict[str, float]]:  # fmt: skip
    """Grow one TreePO tree per prompt; returns the leaves (payload = (prompt index, path)) sorted by
    (prompt, path) and metrics. `widths[i]` leaves for prompt i (fewer only with fallback off)."""
    depth = max_depth or math.ceil(sp.max_new_tokens / L)
    rng = random.Random(sp.seed)
    dec = engine.tree_session(sp)
    n_roots = len(prompts)
    next_id = [0] * n_roots
    leaves: list[list[Row]] = [[] for _ in range(n_roots)]

    def new_path(i: int, prefix: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        next_id[i] += 1
        return i, prefix + (next_id[i] - 1,)

    dec.add([Row(p, payload=(i, ())) for i, p in enumerate(prompts)])
    index, payloads = [], []
    for i in range(n_roots):
        k = min(rng.randint(*first), widths[i])
        index += [i] * k
        payloads += [new_path(i, ()) for _ in range(k)]
    dec.fork(index, payloads)
    fallbacks = 0
    while len(dec):
        done_now = [0] * n_roots
        for r in dec.decode(L):
            leaves[r.payload[0]].append(r)
            done_now[r.payload[0]] += 1
        active: dict[int, list[int]] = {}
        for j, r in enumerate(dec.rows):
            if len(r.payload[1]) >= depth:  # MAX_INFER_STEPS
                r.finish_reason = "length"
                leaves[r.payload[0]].append(r)
                done_now[r.payload[0]] += 1
            else:
                active.setdefault(r.payload[0], []).append(j)
        index, payloads = [], []
        for i, js in active.items():
            remaining = max(widths[i] - len(leaves[i]), 0)
            for j, c in zip(js, branch_counts(len(js), remaining, done_now[i], W)):
                index += [j] * c
                payloads += [new_path(i, dec.rows[j].payload[1]) for _ in range(c)]
        dec.fork(index, payloads)
        if fallback:
            restart = _fallback_rows(leaves, widths, set(active), prompts, L, W, rng, new_path)
            fallbacks += len(restart)
            dec.add(restart)
    out = sorted((r for ls in leaves for r in ls), key=lambda r: r.payload)
    n_leaves = len(out)
    distinct = len({(r.payload[0], tuple(r.tokens)) for r in out})
    return out, {
        "tree/leaves": float(n_leaves),
        "tree/decoded_tokens": float(dec.decoded),
        "tree/prefill_tokens": float(dec.prefilled),
        "tree/decoded_per_leaf": dec.decoded / max(n_leaves, 1),
        "tree/fallback_rows": float(fallbacks),
        "tree/distinct_ratio": distinct / max(n_leaves, 1),
        "tree/depth_max": float(max((len(r.payload[1]) for r in out), default=0)),
    }


def _fallback_rows(leaves, widths, active, prompts, L, W, rng, new_path) -> list[Row]:
    """TreePO's fallback for roots with no active path and fewer leaves than their width."""
    rows: list[Row] = []
    for i in range(len(prompts)):
        budget = widths[i] - len(leaves[i])
        if i in active or budget <= 0:
            continue
        cands = [r for r in leaves[i] if r.finish_reason == "stop"]  # "soft_boxed_and_eos": ended by EOS
        rng.shuffle(cands)
        for leaf in cands:
            if budget <= 0:
                break
            blocks = math.ceil(len(leaf.tokens) / L)
            cut_blocks = blocks - rng.randint(1, blocks)
            base = Row(prompts[i], leaf.tokens[: cut_blocks * L], leaf.logprobs[: cut_blocks * L],
                       leaf.entropies[: cut_blocks * L], leaf.versions[: cut_blocks * L])  # fmt: skip
            for _ in range(min(W, budget)):
                rows.append(base.copy(new_path(i, leaf.payload[1][:cut_blocks])))
                budget -= 1
        if not cands:  # no leaf ended with EOS: restart from the prompt
            rows += [Row(prompts[i], payload=new_path(i, ())) for _ in range(min(W, budget))]
    return rows
