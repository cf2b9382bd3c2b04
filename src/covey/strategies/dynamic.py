"""`dynamic`: DAPO's dynamic sampling as a strategy wrapped around another one.

DAPO (arXiv 2503.14476, §3.2): over-sample and filter out groups whose rewards are all equal (they
get zero advantage under every group-relative estimator), refill with new prompts until the batch
holds B informative groups. Generation is bounded by `max_rounds`; when the batch cannot be filled
the step trains on what was kept (or, if nothing was kept, on the last round unfiltered so a step is
never empty) and says so in the metrics (`filter/underfilled`, `filter/fallback_unfiltered`). The
inner strategy's metrics (and the rewards') are the mean over the step's rounds, not the last
round's (multiply by `filter/gen_batches` for a step's total, e.g. april's decoded tokens).
It needs groups of two rows or more and prefers a group-relative estimator (`covey.compat`).

A group of one sample is *not* informative here (its group-relative advantage is zero by
construction), unlike verl-recipe which keeps singletons.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.samplers.filters import informative_groups
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, register_strategy
from covey.rollouts import Rollouts

__all__ = ["DynamicSampling"]


@register_strategy("dynamic")
class DynamicSampling:
    """Filter zero-signal groups of `inner` and refill from the sampler, at most `max_rounds` rounds.

    inner:        the strategy that generates each round (name or import path).
    inner_params: its parameters.
    max_rounds:   generation rounds per step before falling back (DAPO's max_num_gen_batches).
    """

    @staticmethod
    def inner_strategy(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The strategy this one runs each round (its engine needs are checked too)."""
        return params.get("inner", "group"), params.get("inner_params") or {}

    # covey.compat: a group of one row is never informative, so with single rows every round is dropped;
    # with an estimator that is not group-relative the dropped groups had signal
    caps = StrategyCaps(inner=inner_strategy, requires=("!single_rows",), prefers=("group_relative",))

    def __init__(self, *, inner: str = "group", inner_params: dict[str, Any] | None = None, max_rounds: int = 10):
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        if inner == "dynamic":
            raise ValueError("dynamic sampling cannot wrap itself; give inner: group (or another strategy)")
        self.inner = STRATEGIES.build(inner, inner_params or {})
        self.max_rounds = max_rounds

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        want = len(items)
        kept: list[Rollouts] = []
        n_kept, zero_frac, offset = 0, [], 0
        per_round: dict[str, list[float]] = {}  # the inner strategy's and the scorer's metrics, per round
        last, draws = None, ctx.draws
        for r in range(self.max_rounds):
            round_ctx = dataclasses.replace(ctx, draws=draws, sampling=lambda sub, r=r: ctx.sampling(r * 1000 + sub))
            batch, m = self.inner.rollout([d.item for d in draws], round_ctx)
            m = dict(m)
            if batch.rewards is None:
                m.update(ctx.score(batch))
            for k, v in m.items():
                per_round.setdefault(k, []).append(float(v))
            _, batch.group = torch.unique(batch.group, return_inverse=True)
            batch.group = batch.group + offset  # unique across rounds
            offset = int(batch.group.max()) + 1
            keep = informative_groups(batch.scalar_rewards(), batch.group)
            zero_frac.append(1.0 - float(keep.float().mean()))
            last = batch
            if bool(keep.any()):
                kept.append(batch.select(keep))
                n_kept += int(torch.unique(batch.group[keep]).numel())
            if n_kept >= want:
                break
            draws = ctx.draw(want)
        rounds = len(zero_frac)
        fallback = not kept
        out = last if fallback else Rollouts.concat(kept)
        if not fallback and n_kept > want:  # keep the first `want` groups
            groups = torch.unique_consecutive(out.group)[:want]
            out = out.select(torch.isin(out.group, groups))
        metrics = {k: sum(v) / len(v) for k, v in per_round.items()}  # mean over the step's rounds
        metrics.update({
            "filter/gen_batches": rounds,
            "filter/kept_groups": min(n_kept, want),
            "filter/zero_signal_frac": sum(zero_frac) / rounds,
            "filter/underfilled": float(n_kept < want),
            "filter/fallback_unfiltered": float(fallback),
        })  # fmt: skip
        return out, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner", {}))
