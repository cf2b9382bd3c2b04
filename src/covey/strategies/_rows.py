"""Shared by the tree and partial-rollout strategies: `TreeSession` rows in, a `Rollouts` batch out."""

from __future__ import annotations

import torch

from covey.engine.base import Row
from covey.models import apply_chat
from covey.rollouts import Rollouts

__all__ = ["given_rows_batch", "prompt_ids", "rows_to_batch"]


def prompt_ids(tokenizer, items: list[dict]) -> list[list[int]]:
    """The chat-templated prompt token ids of each item."""
    return [list(apply_chat(tokenizer, it["prompt"])) for it in items]


def given_rows_batch(prompts: list[torch.Tensor], rows: list[list[int]], finish: list[str], group: list[int],
                     items: list[dict], **fields) -> Rollouts:
    """A validated `Rollouts` of completions given as token lists (offline data: no behaviour
    log-probs, zeros), right-padded with 0; `fields` sets further `Rollouts` fields."""
    t = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), t, dtype=torch.long)
    mask = torch.zeros(len(rows), t)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1.0
    return Rollouts(
        prompt_ids=prompts, completion_ids=ids, completion_mask=mask, behaviour_logprobs=torch.zeros(len(rows), t),
        group=torch.tensor(group, dtype=torch.long), prompt_id=torch.tensor([int(it["id"]) for it in items]),
        finish_reason=finish, items=items, **fields,
    ).validate()  # fmt: skip


def rows_to_batch(rows: list[Row], items: list[dict], groups: list[int], pad_id: int, *, paths: bool = False) -> Rollouts:
    """One `Rollouts` row per finished `Row`: `items[i]` / `groups[i]` are row i's item and group id;
    `paths=True` stores each row's payload path (a tuple of node ids) as `tree_path`."""
    if not rows:
        raise ValueError("rows_to_batch: no finished rows to turn into a batch")
    t = max(1, max(len(r.tokens) for r in rows))
    n = len(rows)
    ids = torch.full((n, t), pad_id, dtype=torch.long)
    mask = torch.zeros(n, t)
    lp = torch.zeros(n, t)
    ver = torch.zeros(n, t, dtype=torch.long)
    ent = torch.zeros(n, t) if all(len(r.entropies) == len(r.tokens) for r in rows) else None
    for i, r in enumerate(rows):
        k = len(r.tokens)
        ids[i, :k] = torch.tensor(r.tokens, dtype=torch.long)
        mask[i, :k] = 1.0
        lp[i, :k] = torch.tensor(r.logprobs, dtype=torch.float32)
        ver[i, :k] = torch.tensor(r.versions, dtype=torch.long)
        if ent is not None and k:
            ent[i, :k] = torch.tensor(r.entropies, dtype=torch.float32)
    return Rollouts(
        prompt_ids=[torch.tensor(r.prompt, dtype=torch.long) for r in rows],
        completion_ids=ids,
        completion_mask=mask,
        behaviour_logprobs=lp,
        group=torch.tensor(groups, dtype=torch.long),
        prompt_id=torch.tensor([int(it["id"]) for it in items], dtype=torch.long),
        finish_reason=[r.finish_reason or "length" for r in rows],
        entropies=ent,
        policy_version=ver,
        tree_path=[tuple(r.payload[1]) for r in rows] if paths else None,
        items=list(items),
    ).validate()
