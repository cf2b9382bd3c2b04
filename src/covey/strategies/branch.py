"""`branch`: BranchGRPO's branching tree for language models.

Paper: "BranchGRPO: Stable and Efficient GRPO with Structured Branching in Diffusion Models"
(arXiv 2509.06040). The paper branches diffusion denoising trajectories at chosen steps; here the
same tree is grown over token segments (the diffusion part is out of scope):

    before segment d (d in `branch_depths`, default every segment; d = 0 splits the root) each active
    path splits into `branch_factor` children sharing its KV cache (`TreeDecoder.fork`), as long as
    the prompt's paths (active + finished) stay <= width (the group size); paths end on EOS, a stop
    string or max_new_tokens.

Each leaf's `tree_path` holds one node id per segment and `segment_tokens` the segment
length, which the `branch_grpo` advantage estimator (`covey.algos.advantages.tree`) needs for its
reward fusion and depth-wise normalisation (a token of segment d gets the advantage of the node it
leads to, and a segment shared by several leaves is trained once, as the released code's
transitions: Fredreic1849/BranchGRPO @ 19fbb9fc92ad1857212f3b664d6e9ff80c8b3804).
A root whose paths end before it reaches `width` leaves has fewer leaves (no fallback: groups may
differ in size; with answers of a few tokens use a short `segment_tokens` so the tree widens in time):
it is counted (`tree/short_groups`, `tree/missing_leaves`) and warned about once. The paper's
width/depth pruning of the backward pass is not implemented.
"""

from __future__ import annotations

import logging
from typing import Any

from covey.engine.base import ForkingEngine, Row
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["BranchStrategy"]


@register_strategy("branch")
class BranchStrategy:
    """BranchGRPO tree rollouts (see the module docstring).

    segment_tokens: tokens per segment (one tree depth).
    branch_factor:  children per path at a branching depth.
    branch_depths:  segment indices before which paths split (None: before every segment, 0 = the root).
    """

    caps = StrategyCaps(engine_protocols=(ForkingEngine,), provides=("tree_path", "segment_tokens"))

    def __init__(self, *, segment_tokens: int = 16, branch_factor: int = 2, branch_depths: list[int] | None = None):
        if segment_tokens < 1 or branch_factor < 2:
            raise ValueError(f"segment_tokens must be >= 1 and branch_factor >= 2, got {segment_tokens}, {branch_factor}")
        if branch_depths is not None and any(d < 0 for d in branch_depths):
            raise ValueError(f"branch_depths must be segment indices >= 0, got {branch_depths}")
        self.L, self.k = segment_tokens, branch_factor
        self.depths = None if branch_depths is None else set(branch_depths)
        self.warned = False  # a short group is warned about once per run (and counted every step)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        widths = [d.n for d in ctx.draws]
        dec = ctx.engine.tree_session(sp)
        dec.add([Row(p, payload=(i, ())) for i, p in enumerate(prompt_ids(ctx.tokenizer, items))])
        leaves: list[Row] = []
        next_id = [0] * len(items)
        seg = 0
        while len(dec):
            count = [sum(1 for r in leaves if r.payload[0] == i) for i in range(len(items))]
            active = [sum(1 for r in dec.rows if r.payload[0] == i) for i in range(len(items))]
            split = self.depths is None or seg in self.depths
            index, payloads = [], []
            for j, r in enumerate(dec.rows):  # split BEFORE segment `seg` (seg 0: at the root)
                i = r.payload[0]
                room = widths[i] - count[i] - active[i]  # extra paths this root may still grow
                c = min(self.k, 1 + room) if split else 1
                active[i] += c - 1
                for _ in range(c):
                    index.append(j)
                    payloads.append((i, r.payload[1] + (next_id[i],)))
                    next_id[i] += 1
            dec.fork(index, payloads)
            leaves += dec.decode(self.L)
            seg += 1
        leaves.sort(key=lambda r: r.payload)
        groups = [r.payload[0] for r in leaves]
        batch = rows_to_batch(leaves, [items[g] for g in groups], groups, ctx.engine.pad_token_id, paths=True)
        batch.segment_tokens = self.L
        missing = [w - groups.count(i) for i, w in enumerate(widths)]
        short = sum(m > 0 for m in missing)
        if short and not self.warned:
            self.warned = True
            logging.getLogger("covey").warning(
                f"rollout.strategy branch: {short} of {len(widths)} prompts ended with fewer leaves than the group size "
                f"({sum(missing)} missing): their paths stopped before the tree was {max(widths)} wide; lower segment_tokens "
                "or raise sampling.max_new_tokens (metrics tree/short_groups, tree/missing_leaves)")  # fmt: skip
        return batch, {
            "tree/short_groups": float(short),
            "tree/missing_leaves": float(sum(missing)),
            "tree/leaves": float(len(leaves)),
            "tree/decoded_tokens": float(dec.decoded),
            "tree/decoded_per_leaf": dec.decoded / max(len(leaves), 1),
            "tree/depth_max": float(max(len(r.payload[1]) for r in leaves)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
