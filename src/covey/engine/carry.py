"""Unfinished completions carried over a weight update: the one home of the carry-over that APRIL
(`covey.strategies.april`) and interrupted generation (`InterruptibleEngine.interrupt`, for the
async executor) share.

A completion cut short is a `Row`: its prompt, the tokens sampled so far with their behaviour
log-probs, entropies and per-token policy versions. It continues from prompt + its token ids (ids,
not text: no re-tokenisation drift) under the weights the engine holds when it continues, so one
completion may mix tokens of several policy versions and each token keeps the version (and the
log-prob) of the weights that sampled it. Its remaining budget is its limit minus the tokens it
has; a carried row with no budget left is finished with reason "length" (APRIL's TRUNCATED).

    generation_rows(gen)                  Generation -> one Row per row (finish_reason "abort" kept)
    rows_generation(rows, index, pad)     Rows -> Generation (the inverse)
    out_of_budget(row, limit)             finish a carried row that has no budget left
    continue_generation(engine, gen, sp)  continue the "abort" rows of `gen` with `engine.generate`
    row_state(row) / row_from(state)      a Row as tensors (checkpoints of carried rows)

`continue_generation` works with any `Engine` (one `generate` call over the cut rows, n=1 each, a
per-row budget through `prompt_max_new_tokens`); a `ForkingEngine` strategy (APRIL) continues its
rows in a tree session instead (`TreeSession.add` prefills prompt + tokens). A stop string that
straddles the cut (begins in the partial tokens, ends in the continuation) is not matched: the
continuation only checks its own tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.engine.base import Engine, Generation, Row, SamplingParams

__all__ = ["continue_generation", "generation_rows", "out_of_budget", "row_from", "row_state", "rows_generation"]

ABORT = "abort"
"""`Generation.finish_reason` of a row cut short by `InterruptibleEngine.interrupt`."""


def generation_rows(gen: Generation) -> list[Row]:
    """One `Row` per row of `gen` (prompt, tokens, log-probs, entropies, versions, finish reason)."""
    rows = []
    for i in range(len(gen)):
        k = int(gen.lengths[i])
        rows.append(Row(
            prompt=gen.prompt_ids[i].tolist(), tokens=gen.completion_ids[i, :k].tolist(),
            logprobs=gen.logprobs[i, :k].tolist(),
            entropies=[] if gen.entropies is None else gen.entropies[i, :k].tolist(),
            versions=[] if gen.policy_version is None else gen.policy_version[i, :k].tolist(),
            finish_reason=gen.finish_reason[i],
        ))  # fmt: skip
    return rows


def rows_generation(rows: list[Row], prompt_index: torch.Tensor, pad_id: int) -> Generation:
    """The `Generation` of `rows` (row i continues prompt `prompt_index[i]`); entropies only when
    every row has one per token."""
    t = max([1] + [len(r.tokens) for r in rows])
    n = len(rows)
    ids = torch.full((n, t), pad_id, dtype=torch.long)
    mask, lp = torch.zeros(n, t), torch.zeros(n, t)
    ver = torch.zeros(n, t, dtype=torch.long)
    with_ent = all(len(r.entropies) == len(r.tokens) for r in rows) and any(r.entropies for r in rows)
    ent = torch.zeros(n, t) if with_ent else None
    for i, r in enumerate(rows):
        k = len(r.tokens)
        if not k:
            continue
        ids[i, :k] = torch.tensor(r.tokens, dtype=torch.long)
        mask[i, :k] = 1.0
        lp[i, :k] = torch.tensor(r.logprobs, dtype=torch.float32)
        ver[i, :k] = torch.tensor(r.versions, dtype=torch.long)
        if ent is not None:
            ent[i, :k] = torch.tensor(r.entropies, dtype=torch.float32)
    return Generation(
        prompt_ids=[torch.tensor(r.prompt, dtype=torch.long) for r in rows], completion_ids=ids, completion_mask=mask,
        logprobs=lp, finish_reason=[r.finish_reason or ABORT for r in rows], prompt_index=prompt_index.clone(),
        entropies=ent, policy_version=ver,
    )  # fmt: skip


def out_of_budget(row: Row, limit: int) -> bool:
    """True (and `row.finish_reason` set to "length") when an unfinished carried row already has
    `limit` tokens: it cannot continue."""
    if row.finish_reason in (None, ABORT) and len(row.tokens) >= limit:
        row.finish_reason = "length"
        return True
    return False


def continue_generation(engine: Engine, gen: Generation, sampling: SamplingParams) -> Generation:
    """Continue every row of `gen` that was cut short (finish reason "abort") from prompt + its
    tokens under the weights `engine` holds now; finished rows are kept as they are. Returns a
    `Generation` with the same rows in the same order: each continued row is its partial tokens
    followed by the continuation (log-probs, entropies and policy versions likewise, each token
    keeping its own), with the continuation's finish reason ("abort" again when this call is
    interrupted too). Each row's budget is its limit (`sampling.prompt_max_new_tokens` of its
    prompt, else `max_new_tokens`) minus the tokens it has; `sampling.seed` seeds the continuation
    as given (pass a fresh one: reusing the first call's seed replays its random numbers)."""
    rows = generation_rows(gen)
    limits = sampling.prompt_max_new_tokens
    todo, budgets = [], []
    for i, r in enumerate(rows):
        limit = sampling.max_new_tokens if limits is None else limits[int(gen.prompt_index[i])]
        if r.finish_reason == ABORT and not out_of_budget(r, limit):
            todo.append(i)
            budgets.append(limit - len(r.tokens))
    if todo:
        sp = dataclasses.replace(sampling, max_new_tokens=max(budgets), prompt_max_new_tokens=tuple(budgets))
        more = engine.generate([rows[i].prompt + rows[i].tokens for i in todo], 1, sp)
        for j, (i, r) in enumerate(zip(todo, generation_rows(more))):
            base = rows[i]
            base.tokens += r.tokens
            base.logprobs += r.logprobs
            base.entropies = base.entropies + r.entropies if len(base.entropies) == len(base.tokens) - len(r.tokens) else []
            base.versions += r.versions
            base.finish_reason = r.finish_reason
    return rows_generation(rows, gen.prompt_index, engine.pad_token_id)


def row_state(r: Row) -> dict[str, Any]:
    """A `Row` as tensors and a string (what a checkpoint stores; the payload is not kept)."""
    return {
        "prompt": torch.tensor(r.prompt, dtype=torch.long), "tokens": torch.tensor(r.tokens, dtype=torch.long),
        "logprobs": torch.tensor(r.logprobs, dtype=torch.float64), "entropies": torch.tensor(r.entropies, dtype=torch.float64),
        "versions": torch.tensor(r.versions, dtype=torch.long), "finish_reason": r.finish_reason or "",
    }  # fmt: skip


def row_from(s: dict[str, Any]) -> Row:
    """The `Row` that `row_state` stored."""
    return Row(prompt=s["prompt"].tolist(), tokens=s["tokens"].tolist(), logprobs=s["logprobs"].tolist(),
               entropies=s["entropies"].tolist(), versions=s["versions"].tolist(), finish_reason=s["finish_reason"] or None)  # fmt: skip
