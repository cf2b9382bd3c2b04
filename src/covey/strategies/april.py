"""`april`: active partial rollouts. Over-provision groups, stop when enough have finished, carry the
unfinished completions (tokens, behaviour log-probs, per-token policy versions) to the next step.

Paper / code: APRIL, "Active Partial Rollouts in Reinforcement Learning to Tame Long-tail Generation"
(arXiv 2509.18521). Checked against the released code: RLsys-Foundation/APRIL @
a72b5853d63a3bf27d804be970e414d31b2c5843 (slime; `slime/rollout/sglang_example.py::
generate_rollout_async, abort, generate`, `slime/ray/buffer.py`). Notes: docs/rollouts.md.

Per step, with B = the step's prompts:

    in flight = carried groups (FIFO) + this step's items + drawn items, ceil(over_provision * B) in all
    decode every unfinished completion `chunk_tokens` at a time (one `TreeDecoder` batch: a tick)
    after each tick: groups whose completions have all finished are done (in finishing order)
    stop at B done groups: they are the batch. Groups that finished in the same tick beyond the B
        are dropped (the code: "here we have not stored all the unused samples back to the data
        buffer"); every unfinished group goes back to the buffer with its finished completions kept
        and its unfinished ones cut where they stand ("abort")
    pi_old for the update (`old_logprobs: recompute`, the code): recomputed with the current weights
        over every token, carried ones included, by the learner before the update, and no
        importance correction (leave `algo.correction` unset)

A carried completion resumes from prompt + its token ids (not text: no re-tokenisation drift;
`covey.engine.carry`, shared with interrupted generation), so
the batch mixes tokens of several policy versions; `Rollouts.policy_version` [N, T] records which
weights produced each token and `behaviour_logprobs` are those of that policy. covey's variants,
named options: `keep_surplus: true` carries the finished surplus groups to the next step (served
first: with similar completion lengths every second step then generates nothing and trains on stale
groups only); `old_logprobs: behaviour` keeps each token's behaviour log-prob as pi_old (stale tokens
are clipped against the policy that sampled them), to pair with `algo.correction: tis` or `decoupled`
(AReaL), which weight every token by pi_old / pi_behaviour. The buffer is part of `state_dict()`
(saved in checkpoints), so a resumed run continues the same completions. Metrics:
`april/stale_token_frac` (tokens of an older policy version in the batch), carried / buffered /
dropped group counts, ticks, decoded tokens.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from covey.engine.base import ForkingEngine, Row
from covey.engine.carry import out_of_budget, row_from, row_state
from covey.strategies._rows import prompt_ids, rows_to_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["APRIL"]


@register_strategy("april")
class APRIL:
    """Active partial rollouts (see the module docstring).

    over_provision: groups in flight per step / prompts per step (APRIL's scripts: 64 / 32 = 2).
    chunk_tokens:   tokens decoded per tick between checks for finished groups.
    keep_surplus:   carry finished groups beyond the B to the next step (covey's variant; code: drop).
    old_logprobs:   "recompute" (code: pi_old of the current weights) or "behaviour" (covey's variant).
    """

    caps = StrategyCaps(engine_protocols=(ForkingEngine,), carries_rollouts=True)  # unfinished completions go on next step

    def __init__(self, *, over_provision: float = 2.0, chunk_tokens: int = 16, keep_surplus: bool = False,
                 old_logprobs: Literal["recompute", "behaviour"] = "recompute"):  # fmt: skip
        if not over_provision >= 1.0:
            raise ValueError(f"over_provision must be >= 1.0 (groups in flight per prompt of the step), got {over_provision}")
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        if old_logprobs not in ("recompute", "behaviour"):
            raise ValueError(f"old_logprobs must be 'recompute' or 'behaviour', got {old_logprobs!r}")
        self.over_provision, self.chunk = float(over_provision), int(chunk_tokens)
        self.keep_surplus, self.old_logprobs = bool(keep_surplus), old_logprobs
        self.buffer: list[dict] = []  # groups: {"item": dict, "rows": [Row, ...]} (finish_reason set = done)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        want = len(items)
        groups = self.buffer + [{"item": d.item, "rows": [None] * d.n} for d in ctx.draws]
        self.buffer = []
        extra = math.ceil(self.over_provision * want) - len(groups)
        if extra > 0:
            groups += [{"item": d.item, "rows": [None] * d.n} for d in ctx.draw(extra)]
        sp = ctx.sampling(0)
        prompts = prompt_ids(ctx.tokenizer, [g["item"] for g in groups])
        dec = ctx.engine.tree_session(sp)
        carried, fresh = [], []
        for gi, g in enumerate(groups):
            for si, row in enumerate(g["rows"]):
                if row is None:
                    fresh.append((gi, si))
                elif row.finish_reason is None and not out_of_budget(row, sp.max_new_tokens):  # no budget: TRUNCATED
                    row.payload = (gi, si)
                    carried.append(row)
        dec.add(carried)
        first = {}
        for gi, si in fresh:  # one prefill per fresh group, its other samples forked from it
            first.setdefault(gi, []).append(si)
        n0 = len(dec)
        dec.add([Row(prompts[gi], payload=(gi, sis[0])) for gi, sis in first.items()])
        index = list(range(n0)) + [n0 + k for k, sis in enumerate(first.values()) for _ in sis]
        dec.fork(index, [r.payload for r in dec.rows[:n0]] + [(gi, si) for gi, sis in first.items() for si in sis])

        done_order = [gi for gi, g in enumerate(groups) if all(r is not None and r.finish_reason for r in g["rows"])]
        ticks = 0
        while len(done_order) < want and len(dec):
            ticks += 1
            for r in dec.decode(self.chunk):
                gi, si = r.payload
                groups[gi]["rows"][si] = r
                if gi not in done_order and all(x is not None and x.finish_reason for x in groups[gi]["rows"]):
                    done_order.append(gi)
        for r in dec.take():  # abort: cut the unfinished completions where they stand
            groups[r.payload[0]]["rows"][r.payload[1]] = r
        chosen = done_order[:want]
        surplus = done_order[want:]  # finished in the last tick beyond the B: dropped (code) or kept
        self.buffer = [groups[gi] for gi in surplus] if self.keep_surplus else []
        self.buffer += [g for gi, g in enumerate(groups) if gi not in set(done_order)]
        rows, its, gids = [], [], []
        for k, gi in enumerate(chosen):
            for r in groups[gi]["rows"]:
                rows.append(r)
                its.append(groups[gi]["item"])
                gids.append(k)
        batch = rows_to_batch(rows, its, gids, ctx.engine.pad_token_id)
        if self.old_logprobs == "recompute":  # the learner recomputes pi_old with the current weights
            batch.recompute_old_logprobs = True
        version = int(ctx.engine.version)
        real = batch.completion_mask > 0
        stale = (batch.policy_version < version) & real
        partial = sum(1 for g in self.buffer for r in g["rows"] if r is not None and r.tokens and not r.finish_reason)
        return batch, {
            "april/stale_token_frac": float(stale.sum()) / max(int(real.sum()), 1),
            "april/carried_groups": float(sum(1 for gi in chosen if any(v < version for r in groups[gi]["rows"] for v in r.versions))),
            "april/inflight_groups": float(len(groups)),
            "april/buffer_groups": float(len(self.buffer)),
            "april/dropped_groups": 0.0 if self.keep_surplus else float(len(surplus)),
            "april/buffer_partial_rows": float(partial),
            "april/ticks": float(ticks),
            "april/decoded_tokens": float(dec.decoded),
        }  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": [{"item": g["item"], "rows": [None if r is None else row_state(r) for r in g["rows"]]} for g in self.buffer]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = [{"item": g["item"], "rows": [None if r is None else row_from(r) for r in g["rows"]]}
                       for g in state.get("buffer", [])]  # fmt: skip

