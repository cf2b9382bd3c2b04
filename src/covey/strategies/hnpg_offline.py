"""`hnpg_offline`: on-policy groups plus offline states, for the `hnpg` objective.

HNPG ("Offline Data Enhanced On-Policy Policy Gradient with Provable Guarantees", arXiv 2311.08384;
YifeiZhou02/HNPG @ 7d7ace151c379497b0acc249ce8457b4e17b860d, `trpo.py::update_params`) learns from two
sources each update: on-policy rollouts, and a batch of offline transitions (as many as on-policy samples
per horizon). The offline transitions train the critic (fitted-Q targets) and their states join the
policy update with actions re-sampled from the current policy. Here one step is one horizon (a completion):

    on-policy rows:  the inner strategy's groups for the sampler's prompts, scored by the run's rewards
    logged rows:     `offline_rows` rows of an offline file {prompt, completion, reward} (prompt + the logged
                     completion, its logged reward): the critic's offline targets, never in the policy loss
    offline samples: `offline_group` completions of the current policy at each logged prompt (HNPG's
                     re-sampled actions), scored by the critic in the objective, not by rewards

Rows carry their role in the item column ``hnpg_role`` ("logged", "offline"; absent on on-policy rows) and a
logged row its reward in ``logged_reward``; offline rows get zero in every reward column. The offline file is
read in a seeded order, epoch after epoch (`state_dict` keeps the position).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.samplers.base import Draw
from covey.samplers.groups import sample_groups
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, register_strategy

__all__ = ["HNPGOffline", "read_offline"]


def read_offline(path: str) -> list[dict]:
    """The rows of an offline JSONL file: each needs a prompt, a non-empty completion and a finite reward."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"hnpg_offline: offline data {path!r} does not exist")
    rows = []
    for n, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        r = row.get("reward")
        if "prompt" not in row or not row.get("completion") or not isinstance(r, (int, float)) or not math.isfinite(r):
            raise ValueError(f"hnpg_offline: {path} line {n} needs a prompt, a non-empty completion and a finite reward")
        rows.append(row)
    if not rows:
        raise ValueError(f"hnpg_offline: {path} holds no rows")
    return rows


@register_strategy("hnpg_offline")
class HNPGOffline:
    """On-policy groups of `inner` plus logged offline rows and policy samples at their prompts.

    offline:        the offline JSONL file ({prompt, completion, reward} per line).
    offline_rows:   logged rows per step (0: one per on-policy row, HNPG's equal share).
    offline_group:  policy samples per logged prompt (0: the run's group size).
    """

    @staticmethod
    def inner_strategy(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return params.get("inner", "group"), params.get("inner_params") or {}

    caps = StrategyCaps(inner=inner_strategy, provides=("offline_states",), objective="hnpg")

    def __init__(self, *, offline: str, offline_rows: int = 0, offline_group: int = 0, inner: str = "group",
                 inner_params: dict[str, Any] | None = None, seed: int = 0):  # fmt: skip
        if offline_rows < 0 or offline_group < 0:
            raise ValueError(f"hnpg_offline: offline_rows and offline_group must be >= 0 (got {offline_rows}, {offline_group})")
        self.rows = read_offline(offline)
        self.take, self.group_n, self.seed = offline_rows, offline_group, seed
        self.inner = STRATEGIES.build(inner, inner_params or {})
        self.epoch, self.pos = 0, 0
        self.order = self._order(0)

    def _order(self, epoch: int) -> list[int]:
        return torch.randperm(len(self.rows), generator=torch.Generator().manual_seed(self.seed * 7919 + epoch)).tolist()

    def _next(self, k: int) -> list[dict]:
        out = []
        while len(out) < k:
            if self.pos == len(self.order):
                self.epoch, self.pos = self.epoch + 1, 0
                self.order = self._order(self.epoch)
            out.append(self.rows[self.order[self.pos]])
            self.pos += 1
        return out

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        batch, metrics = self.inner.rollout(items, ctx)
        metrics = dict(metrics)
        if batch.rewards is None:
            metrics.update(ctx.score(batch))
        _, batch.group = torch.unique(batch.group, return_inverse=True)
        logged = self._next(self.take or len(batch))
        g_on = int(batch.group.max()) + 1
        n = self.group_n or max(d.n for d in ctx.draws)
        base_id = -1 - self.epoch * len(self.rows) - self.pos  # offline items get their own negative ids
        offline_items = [{**r, "id": base_id - i} for i, r in enumerate(logged)]
        draws = [Draw(item={**it, "hnpg_role": "offline"}, n=n) for it in offline_items]
        samples = sample_groups(ctx.engine, ctx.tokenizer, draws, ctx.sampling(1))
        samples.group = samples.group + g_on
        log_part = self._logged_rows(ctx, offline_items, g_on)
        for name in ("entropies", "policy_version"):  # token fields the engine filled: zeros on the logged rows
            if getattr(samples, name) is not None:
                like = getattr(samples, name)
                setattr(log_part, name, torch.zeros(len(log_part), log_part.completion_ids.shape[1], dtype=like.dtype))
        parts = []
        for part in (samples, log_part):
            part.rewards = torch.zeros(len(part), len(batch.reward_names))
            part.reward_names, part.reward_weights = batch.reward_names, batch.reward_weights
            parts.append(part)
        out = Rollouts.concat([batch, *parts])
        metrics.update({"hnpg/logged_rows": float(len(log_part)), "hnpg/offline_samples": float(len(samples)),
                        "hnpg/logged_reward_mean": sum(float(r["reward"]) for r in logged) / len(logged)})  # fmt: skip
        return out, metrics

    @staticmethod
    def _logged_rows(ctx: RolloutContext, items: list[dict], g_on: int) -> Rollouts:
        tok = ctx.tokenizer
        limit = ctx.sampling(0).max_new_tokens
        rows = [list(tok.encode(str(it["completion"]), add_special_tokens=False))[:limit] or [tok.pad_token_id or 0] for it in items]
        t = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), t, dtype=torch.long)
        mask = torch.zeros(len(rows), t)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r, dtype=torch.long), 1.0
        return Rollouts(
            prompt_ids=[torch.tensor(apply_chat(tok, it["prompt"]), dtype=torch.long) for it in items], completion_ids=ids,
            completion_mask=mask, behaviour_logprobs=torch.zeros(len(rows), t), group=torch.arange(len(rows)) + g_on,
            prompt_id=torch.tensor([int(it["id"]) for it in items]), finish_reason=["stop"] * len(rows),
            items=[{**it, "hnpg_role": "logged", "logged_reward": float(it["reward"])} for it in items],
        ).validate()  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = state or {}
        self.inner.load_state_dict(state.get("inner", {}))
        self.epoch, self.pos = int(state.get("epoch", 0)), int(state.get("pos", 0))
        self.order = self._order(self.epoch)
