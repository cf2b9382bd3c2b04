"""`uniform`: a seeded permutation of the items, epoch after epoch (GRPO's default sampler).

Its whole state is (epoch, position), so a resumed run draws exactly the prompts an uninterrupted
run would. `pick(k)` walks the order; `next(k, G)` gives each picked item G completions (the samplers
built on this order override one or the other).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from covey.samplers.base import BaseSampler, Draw, register_sampler

__all__ = ["UniformSampler"]


@register_sampler("uniform")
class UniformSampler(BaseSampler):
    def __init__(self, items: Sequence[dict], seed: int = 0):
        super().__init__(items, seed)
        self.epoch, self.pos = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.items), generator=g).tolist()

    def next(self, k: int, group_size: int) -> list[Draw]:
        return [Draw(item, group_size) for item in self.pick(k)]

    def pick(self, k: int) -> list[dict]:
        """The next `k` items (crossing epoch boundaries with a fresh permutation)."""
        out = []
        while len(out) < k:
            if self.pos == len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self.items[self._order[self.pos]])
            self.pos += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed, self.epoch, self.pos = state["seed"], state["epoch"], state["pos"]
        self._order = self._permutation(self.epoch)
