"""Small shared pieces of the feedback samplers (xrpo, d3s, self, masa, drive, gdro).

- `t_quantile(p, df)`: Student-t quantile (no scipy): bisection on the CDF, which is a regularised
  incomplete beta function evaluated with Lentz's continued fraction (Numerical Recipes 6.4).
- `apply_feedback(batch, feedback)`: the trainer's gate, the one place a sampler's `Feedback` reaches
  the batch (after `observe`, before the advantage estimator): rows / tokens it does not keep leave
  the policy loss through `batch.completion_mask`, which the learner multiplies into every loss term
  (`Rollouts.loss_mask`); rows it marks get every reward column set to 0. The estimator still sees
  every row's reward (group statistics include the dropped rows); it sees the shortened lengths.
  `kept_mask` is the mask arithmetic (samplers use it for their kept-fraction metrics) and
  `first_tokens` builds a keep-the-first-L-tokens mask (MASA's cut-off).
- `group_success`: per-group mean success (the `feedback.row_success` scale) and the row -> group map.
- `GatedUniform`: the uniform permutation order, skipping prompts a sampler gated in a recent epoch;
  when every remaining prompt is gated it draws them anyway (a batch is always filled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from covey.samplers.base import Feedback
from covey.samplers.feedback import row_success
from covey.samplers.sampler import UniformSampler
from covey.rollouts import Groups, Rollouts

__all__ = ["GatedUniform", "apply_feedback", "first_tokens", "group_success", "kept_mask", "problem_text", "t_quantile"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` >= 1 degrees of freedom (0.5 < p < 1), to ~1e-10."""
    if df < 1:
        raise ValueError(f"t_quantile needs df >= 1, got {df}")
    if not 0.5 < p < 1.0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1, got {p}")
    hi = 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def kept_mask(mask: Tensor, keep_rows: Tensor | None = None, keep_tokens: Tensor | None = None) -> Tensor:
    """`mask` [N, T] zeroed in rows where `keep_rows` [N] is False and where `keep_tokens` [N, T] is
    False (padding stays 0); None keeps everything."""
    if keep_rows is not None:
        mask = mask * keep_rows.to(mask.device)[:, None].to(mask.dtype)
    if keep_tokens is not None:
        mask = mask * keep_tokens.to(mask.device, mask.dtype)
    return mask


def first_tokens(limit: Tensor, width: int) -> Tensor:
    """[N, width] bool: True on the first `limit[i]` token positions of row i."""
    return torch.arange(width)[None, :] < limit[:, None]


def apply_feedback(batch: Rollouts, feedback: Feedback) -> None:
    """Apply a sampler's `Feedback` to `batch` (see the module docstring); wrong types or shapes raise."""
    if not isinstance(feedback, Feedback):
        raise TypeError(f"a sampler's observe() must return covey.samplers.Feedback, got {type(feedback).__name__}")
    n, shape = len(batch), tuple(batch.completion_mask.shape)
    for name, want in (("keep_rows", (n,)), ("keep_tokens", shape), ("zero_rewards", (n,))):
        x = getattr(feedback, name)
        if x is not None and (not isinstance(x, Tensor) or x.dtype != torch.bool or tuple(x.shape) != want):
            got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"sampler feedback {name} must be a bool tensor of shape {want} for this batch, got {got}")
    if feedback.zero_rewards is not None and bool(feedback.zero_rewards.any()):
        cut = feedback.zero_rewards.to(batch.rewards.device)[:, None]
        batch.rewards = torch.where(cut, torch.zeros_like(batch.rewards), batch.rewards)
    batch.completion_mask = kept_mask(batch.completion_mask, feedback.keep_rows, feedback.keep_tokens)


def group_success(batch: Rollouts) -> tuple[Tensor, Tensor, Tensor]:
    """(inverse [N] long: row -> dense group, mean success [B] float64, size [B] float64)."""
    groups = Groups.of(batch.group.cpu())
    return groups.index, groups.mean(row_success(batch).cpu()), groups.size


def problem_text(item: dict) -> str:
    """The text of an item's prompt: the string itself, or the last user message's content."""
    prompt = item.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1])
    raise ValueError(f"item {item.get('id')!r}: prompt must be a str or a list of chat messages with a user turn")


class GatedUniform(UniformSampler):
    """Uniform order minus gated prompts: a prompt gated in epoch e is skipped through epoch e + skip_epochs."""

    def __init__(self, items: Sequence[dict], seed: int = 0, skip_epochs: int = 1):
        super().__init__(items, seed)
        if skip_epochs < 0:
            raise ValueError(f"skip_epochs must be >= 0, got {skip_epochs}")
        self.skip_epochs = skip_epochs
        self.gated: dict[int, int] = {}  # item id -> epoch in which it was gated
        self.skipped, self.forced = 0, 0  # draws skipped / gated prompts drawn because nothing else was left

    def is_gated(self, key: int) -> bool:
        return key in self.gated and self.epoch - self.gated[key] <= self.skip_epochs

    def pick(self, k: int) -> list[dict]:
        out: list[dict] = []
        run = 0  # gated prompts skipped in a row; after a whole pass, take them anyway
        while len(out) < k:
            item = super().pick(1)[0]
            if self.is_gated(int(item["id"])):
                if run < len(self.items):
                    run += 1
                    self.skipped += 1
                    continue
                self.forced += 1
            else:
                run = 0
            out.append(item)
        return out

    def gate(self, key: int, on: bool) -> None:
        if on:
            self.gated[key] = self.epoch
        else:
            self.gated.pop(key, None)

    def draw_metrics(self, name: str) -> dict[str, float]:
        out = {f"sampler/{name}/skipped": float(self.skipped), f"sampler/{name}/forced": float(self.forced),
               f"sampler/{name}/gated": float(sum(self.is_gated(k) for k in self.gated))}  # fmt: skip
        self.skipped, self.forced = 0, 0
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "gated": dict(self.gated), "skipped": self.skipped, "forced": self.forced}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.gated = {int(k): int(v) for k, v in state["gated"].items()}
        self.skipped, self.forced = state["skipped"], state["forced"]
