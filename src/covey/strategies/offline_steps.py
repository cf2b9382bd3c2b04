"""`offline_steps`: offline step-level data as rows, for `direct_advantage_provisional` (no generation).

Each dataset item is a state and its candidate next steps (`scripts/direct_advantage_data.py` writes
them from a policy's samples and a separately trained critic):

    {"prompt": the question (text or chat), "prefix": the solution so far (text),
     "candidates": [a_1, ..., a_K] (next steps, text), "advantages": [A(s, a_1), ..., A(s, a_K)]}

An item becomes a group of K rows: prompt ids = the chat-templated question followed by the prefix
(the assistant's answer so far), completion = the candidate step's tokens (cut at `sampling.max_new_tokens`,
finish reason "length", counted), `fixed_advantage` = its advantage, and the item column ``advantage``
(the `step_advantage` reward logs it). The rows were written by another policy: behaviour log-probs are
unknown (0) and no importance correction applies.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.strategies._rows import given_rows_batch
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["OfflineSteps"]


@register_strategy("offline_steps")
class OfflineSteps:
    """Offline (state, candidate step, advantage) data as K-row groups; the engine is not called."""

    caps = StrategyCaps(labelled_reward="step_advantage", foreign_rows=True, provides=("offline_steps",))

    def __init__(self, prefix_key: str = "prefix", candidates_key: str = "candidates", advantages_key: str = "advantages"):
        self.prefix, self.cands, self.advs = prefix_key, candidates_key, advantages_key

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        limit = ctx.sampling(0).max_new_tokens
        prompts, rows, adv, row_items, group, finish = [], [], [], [], [], []
        for g, item in enumerate(items):
            cands, advs = item.get(self.cands), item.get(self.advs)
            if not isinstance(cands, list) or not cands or not isinstance(advs, list) or len(advs) != len(cands):
                raise ValueError(f"offline_steps: item {item.get('id')!r} needs a non-empty {self.cands!r} list and an "
                                 f"{self.advs!r} list of the same length")  # fmt: skip
            state = list(apply_chat(tok, item["prompt"])) + list(tok.encode(str(item.get(self.prefix, "")), add_special_tokens=False))
            for text, a in zip(cands, advs):
                if not isinstance(a, (int, float)) or not math.isfinite(a):
                    raise ValueError(f"offline_steps: item {item.get('id')!r} has a non-finite advantage {a!r}")
                ids = list(tok.encode(str(text), add_special_tokens=False))
                if not ids:
                    raise ValueError(f"offline_steps: item {item.get('id')!r} has an empty candidate step")
                finish.append("length" if len(ids) > limit else "stop")
                rows.append(ids[:limit])
                prompts.append(torch.tensor(state, dtype=torch.long))
                adv.append(float(a))
                row_items.append({**item, "advantage": float(a)})
                group.append(g)
        batch = given_rows_batch(prompts, rows, finish, group, row_items, fixed_advantage=torch.tensor(adv, dtype=torch.float32))
        return batch, {"offline/truncated_frac": finish.count("length") / len(finish), "offline/candidates": float(len(rows))}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
