"""What a feedback-driven sampler reads from a scored batch, and the seeded RNG they share.

`row_success` is the per-row outcome a pass rate counts: the task verifier's `accuracy` column when
the batch has one (binary for the built-in tasks), else the weighted scalar reward; both clamped to
[0, 1]. `prompt_outcomes` sums it per dataset item (`prompt_id`), so a prompt drawn twice in one step
(or rolled out in two rounds) is counted once with all its rows.

`draw_generator(seed, salt, n)` is a generator that depends only on its arguments: samplers draw
call number n with it, so their whole RNG state is one counter and a resumed run draws exactly
what an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import Tensor

from covey.rollouts import Groups, Rollouts

__all__ = ["ItemIndex", "draw_generator", "prompt_outcomes", "row_success"]


def row_success(batch: Rollouts) -> Tensor:
    """[N] float64 in [0, 1]: `accuracy` when present, else the scalar reward."""
    if batch.rewards is None:
        raise ValueError("the sampler needs a scored batch (rewards are None): observe() runs after scoring")
    r = batch.reward("accuracy") if "accuracy" in batch.reward_names else batch.scalar_rewards()
    return r.double().clamp(0.0, 1.0)


def prompt_outcomes(batch: Rollouts) -> tuple[Tensor, Tensor, Tensor]:
    """Per dataset item in the batch: (ids [P] long, successes [P] float64, rollouts [P] float64)."""
    prompts = Groups.of(batch.prompt_id.cpu())
    return prompts.ids, prompts.sum(row_success(batch).cpu()), prompts.size


def draw_generator(seed: int, salt: str, n: int) -> torch.Generator:
    """A CPU generator seeded by (seed, salt, n) only."""
    key = f"{seed}/{salt}/{n}".encode()
    return torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1)


class ItemIndex:
    """Dataset item id <-> position in the sampler's item list (ids must be unique ints)."""

    def __init__(self, items: Sequence[dict]):
        self.pos: dict[int, int] = {}
        for i, it in enumerate(items):
            if "id" not in it:
                raise ValueError(f"item {i} has no 'id' field; samplers key their per-prompt state by item id")
            key = int(it["id"])
            if key in self.pos:
                raise ValueError(f"item id {key} appears twice (items {self.pos[key]} and {i}); ids must be unique")
            self.pos[key] = i

    def positions(self, ids: Tensor) -> Tensor:
        """[P] long positions of item ids; ids the sampler does not hold raise a clear error."""
        out = []
        for k in ids.tolist():
            if k not in self.pos:
                raise ValueError(f"batch row has prompt_id {k}, which is not an item of this sampler")
            out.append(self.pos[k])
        return torch.tensor(out, dtype=torch.long)
