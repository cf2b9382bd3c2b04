"""`gt_injection`: TempSamp-R1's mixed-policy rollout ("TempSamp-R1: Effective Temporal Sampling with
Reinforcement Fine-Tuning for Video LLMs", arXiv 2509.18056): in every group of n rollouts one row is
replaced by the gold answer, an off-policy guidance sample that takes part in the group's advantage
(mean and std) like any other row.

Checked against the authors' release, ZhangZikun6666/TempSamp-R1 55a92280a934
`verl/trainer/ray_trainer.py` (`_inject_gt_rollout_in_gen_output`) and `scripts/timelens/timelens_reward.py`
(`build_gt_response`), with `algorithm.use_gt_injection: true`, `gt_replace_index: -1`
(`scripts/timelens/timelens_tempsamp.yaml`):

    row  = group's slot `replace_index` (-1: its last row)
    text = builder(item)          (TempSamp-R1: "<answer> {start:.2f} to {end:.2f} </answer>" from the gold)
    ids  = tokenizer.encode(text, no special tokens) + [EOS]; longer than max_new_tokens: its last tokens
    the row's completion = ids; its reward is scored as any row's; pi_old is recomputed for the whole batch

The gold row's sampling log-probs do not exist (no model sampled it), so the batch asks the learner to
recompute pi_old (`Rollouts.recompute_old_logprobs`, as the reference recomputes old log-probs; it refuses
vLLM's rollout log-probs with GT injection), and an importance correction is refused
(`StrategyCaps.foreign_rows`). Its behaviour log-probs and entropies are 0, its policy version the
current one. A group whose builder gives None or an empty text keeps its sampled rows (the reference skips
it too). `builder`: an import path to `fn(item) -> str | None`, default the item's `column` as it is;
`covey.rewards.temporal:gt_response` is TempSamp-R1's. Differences: the reference also logs with the gold
rows left out (`gt_log_exclude`); covey's reward metrics include them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from covey.registry import import_object
from covey.rollouts import Rollouts
from covey.strategies.base import STRATEGIES, RolloutContext, StrategyCaps, register_strategy

__all__ = ["GtInjection"]


@register_strategy("gt_injection", paper="TempSamp-R1", arxiv="2509.18056")
class GtInjection:
    """One gold row per group, in slot `replace_index` (module docstring).

    inner / inner_params: the strategy that samples the groups (default `group`).
    column:               the item column the default builder returns (default `answer`).
    builder:              import path of `fn(item) -> str | None` (the gold completion's text).
    replace_index:        which row of a group becomes the gold one (-1: the last).
    """

    @staticmethod
    def inner_strategy(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return params.get("inner", "group"), params.get("inner_params") or {}

    caps = StrategyCaps(inner=inner_strategy, foreign_rows=True)

    def __init__(self, *, inner: str = "group", inner_params: dict[str, Any] | None = None, column: str = "answer",
                 builder: str | None = None, replace_index: int = -1):  # fmt: skip
        if inner == "gt_injection":
            raise ValueError("gt_injection cannot wrap itself; give inner: group (or another strategy)")
        self.inner = STRATEGIES.build(inner, inner_params or {})
        self.column, self.replace_index = column, int(replace_index)
        self.builder = import_object(builder, "gt_injection builder") if builder else None

    def _text(self, item: dict) -> str | None:
        if self.builder is not None:
            return self.builder(item)
        if self.column not in item:
            raise ValueError(f"gt_injection: the item has no column {self.column!r} (the gold completion); set column=...")
        return None if item[self.column] is None else str(item[self.column])

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        batch, metrics = self.inner.rollout(items, ctx)
        metrics = dict(metrics)
        tok, limit = ctx.tokenizer, ctx.sampling(0).max_new_tokens
        eos = tok.eos_token_id
        rows: dict[int, list[int]] = {}
        for i, g in enumerate(batch.group.tolist()):
            rows.setdefault(g, []).append(i)
        gold: dict[int, list[int]] = {}
        for members in rows.values():
            if len(members) < 2:  # a group of one would be gold only: nothing sampled left to learn from
                continue
            text = self._text(batch.items[members[0]])
            if not text or not text.strip():
                continue
            ids = list(tok.encode(text, add_special_tokens=False))
            if eos is not None and (not ids or ids[-1] != eos):
                ids.append(int(eos))
            gold[members[self.replace_index]] = ids[-limit:]  # the reference keeps the tail, EOS included
        metrics["rollout/gt_injected_groups"] = float(len(gold))
        if not gold:
            return batch, metrics
        return _with_rows(batch, gold, ctx.policy_version, ctx.engine.pad_token_id), metrics

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


def _with_rows(batch: Rollouts, gold: dict[int, list[int]], version: int, pad_id: int) -> Rollouts:
    """The batch with rows `gold` (row -> token ids) as finished completions nobody sampled; every token
    field is widened to the longest (its axis tag's pad value; ids with the engine's pad id)."""
    t = max(batch.completion_ids.shape[1], max(len(v) for v in gold.values()))
    for f in dataclasses.fields(batch):
        val = getattr(batch, f.name)
        if f.metadata["axis"] in ("token", "row|token") and isinstance(val, torch.Tensor) and val.dim() == 2:
            fill = pad_id if f.name == "completion_ids" else f.metadata["pad"]
            setattr(batch, f.name, torch.nn.functional.pad(val, (0, t - val.shape[1]), value=fill).clone())
    finish = list(batch.finish_reason) if batch.finish_reason is not None else None
    for row, tokens in gold.items():
        k = len(tokens)
        batch.completion_ids[row] = pad_id
        batch.completion_ids[row, :k] = torch.tensor(tokens, dtype=torch.long)
        batch.completion_mask[row] = 0.0
        batch.completion_mask[row, :k] = 1.0
        batch.behaviour_logprobs[row] = 0.0  # unknown: no model sampled it (pi_old is recomputed)
        if batch.entropies is not None:
            batch.entropies[row] = 0.0
        if batch.policy_version is not None:
            batch.policy_version[row] = 0
            batch.policy_version[row, :k] = int(version)
        if finish is not None:
            finish[row] = "stop"
    batch.finish_reason = finish
    batch.recompute_old_logprobs = True  # no model sampled the gold rows: pi_old comes from the learner
    return batch.validate()
