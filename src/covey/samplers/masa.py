"""`masa`: MASA-efficient's predictive gating (skip zero-variance prompts) and early cut-off, sampler side.

Paper: "Meta-Awareness Enhances Reasoning Models: Self-Alignment Reinforcement Learning",
arXiv 2510.03259 (repo akatigre/MASA-RL, renamed "MAPR"). Notes: docs/sampling.md.
In MASA the policy itself predicts, in a meta rollout, each prompt's pass rate and solution length;
MASA-efficient skips prompts predicted all-fail / all-pass and stops solution rollouts that run past
the predicted length (reward 0). Gating and cut-off are confirmed by the abstract; their thresholds
are UNVERIFIED (not in the released code). The meta rollouts and the meta reward are the `masa_meta`
strategy (covey.strategies.masa_meta).

Covey's sampler-side version predicts from the prompt's own history instead of a meta rollout:

    gating:    a prompt whose success (`feedback.row_success`) had zero variance (pass rate 0 or 1) on
               its last `gate_after` visits in a row is skipped for the next `skip_epochs` epochs of
               the uniform order, then re-checked; if nothing else is left it is drawn anyway.
    filtering: with `filter_zero_variance`, groups whose scalar rewards are all equal leave the loss
               this step (completion_mask zeroed; their GRPO advantage is 0 anyway, so this changes
               only the loss normalisation, like DAPO's filter).
    cut-off:   with `cutoff_margin` m, the predicted length of a prompt is the mean length of its
               correct completions at its last visit (none: no cut-off); the limit is
               L = ceil(m * predicted). Generation stops early: the prompt's `Draw` asks for at most
               L + 1 new tokens (`Draw.max_new_tokens`; the first token past L shows the row exceeds
               it; applied by `sample_groups`, so rows of other prompts are unaffected; refills a
               strategy draws carry their limit too). In `observe`, a
               completion longer than L gets every reward column set to 0 and its tokens past L
               masked (through the `Feedback` the trainer applies; MASA's own statistics already
               read the zeroed rewards). Strategies that call the engine without `sample_groups`
               (tree and partial rollouts) ignore the limits: the cut-off then still zeroes rewards
               and masks tokens, but saves no generation (logged once).

Fidelity (re-read 2026-11-24): checked against the released code akatigre/MASA-RL @
fad5726e5570e6eefdecc35dc7be5db42c909e93 (`masa_train/masa_ray_trainer.py`,
`verl/utils/reward_score/meta_cog.py`, `train_masagrpo.sh`): it has the meta rollouts and meta reward
but no gating and no cut-off (the meta predictions only go back into the prompt), so the gating and
cut-off here are reconstructed from the paper's description, with covey's thresholds.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from covey.samplers.base import Draw, Feedback, register_sampler
from covey.samplers.feedback import prompt_outcomes, row_success
from covey.samplers.filters import informative_groups
from covey.samplers._sampling import GatedUniform, first_tokens
from covey.rollouts import Rollouts

__all__ = ["MasaSampler", "cutoff_rows"]


def cutoff_rows(predicted: torch.Tensor, margin: float) -> torch.Tensor:
    """[N] long cut-off length per row: ceil(margin * predicted), or -1 where there is no prediction (NaN)."""
    lim = torch.ceil(margin * predicted.double())
    return torch.where(torch.isnan(lim), torch.full_like(lim, -1), lim).long()


@register_sampler("masa")
class MasaSampler(GatedUniform):
    """MASA-style gating / filtering / cut-off (see the module docstring).

    gate_after:            zero-variance visits in a row before a prompt is gated (0: never gate).
    skip_epochs:           epochs a gated prompt is skipped.
    filter_zero_variance:  drop zero-variance groups from the loss.
    cutoff_margin:         m >= 1 for the length cut-off (generation stops at ceil(m * predicted) + 1 tokens);
                           None (default) turns it off.
    """

    def __init__(
        self, items: Sequence[dict], seed: int = 0, *, gate_after: int = 1, skip_epochs: int = 1,
        filter_zero_variance: bool = True, cutoff_margin: float | None = None,
    ):  # fmt: skip
        super().__init__(items, seed, skip_epochs)
        if gate_after < 0:
            raise ValueError(f"sampler masa: gate_after must be >= 0, got {gate_after}")
        if cutoff_margin is not None and cutoff_margin < 1.0:
            raise ValueError(f"sampler masa: cutoff_margin must be >= 1 (a margin over the predicted length), got {cutoff_margin}")
        self.gate_after, self.filter_zero_variance, self.cutoff_margin = gate_after, filter_zero_variance, cutoff_margin
        self.streak: dict[int, int] = {}  # id -> zero-variance visits in a row
        self.pred_len: dict[int, float] = {}  # id -> mean length of correct completions at the last visit
        self._limited: set[int] = set()  # ids of prompts drawn with a generation limit since the last observe
        self._warned = False  # ignored-limit warning sent

    def next(self, k: int, group_size: int) -> list[Draw]:
        draws = [Draw(item, group_size, self.generation_limit(int(item["id"]))) for item in self.pick(k)]
        self._limited |= {int(d.item["id"]) for d in draws if d.max_new_tokens is not None}
        return draws

    def generation_limit(self, key: int) -> int | None:
        """L + 1 for a prompt with a predicted length (L = ceil(margin * predicted)), else None."""
        if self.cutoff_margin is None or key not in self.pred_len:
            return None
        return int(cutoff_rows(torch.tensor([self.pred_len[key]]), self.cutoff_margin)) + 1

    def _cutoff(self, batch: Rollouts) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows cut [N] bool, tokens kept [N, T] bool): rows longer than their limit L keep L tokens."""
        pid = batch.prompt_id.cpu().tolist()
        pred = torch.tensor([self.pred_len.get(k, math.nan) for k in pid], dtype=torch.float64)
        lim = cutoff_rows(pred, self.cutoff_margin)
        cut = (lim >= 0) & (batch.lengths.cpu() > lim)
        if not self._warned and bool(((lim >= 0) & (batch.lengths.cpu() > lim + 1)).any()):
            self._warned = True
            logging.getLogger("covey").warning(
                "sampler masa: rows ran past their cut-off: the rollout strategy ignores per-prompt generation limits "
                "(only sample_groups-based strategies apply them); rewards are still zeroed and tokens masked, but "
                "no generation is saved")  # fmt: skip
        return cut, ~cut[:, None] | first_tokens(lim, batch.completion_mask.shape[1])

    def observe(self, batch: Rollouts) -> Feedback:
        lengths = batch.lengths.cpu().double()
        cut, keep_tokens = self._cutoff(batch) if self.cutoff_margin is not None else (None, None)
        if cut is not None and bool(cut.any()):  # MASA's statistics read the rewards as the trainer will leave them
            zeroed = torch.where(cut[:, None].to(batch.rewards.device), torch.zeros_like(batch.rewards), batch.rewards)
            batch = dataclasses.replace(batch, rewards=zeroed)
        limited, self._limited = len(self._limited), set()
        ids, succ, count = prompt_outcomes(batch)
        s, pid = row_success(batch).cpu(), batch.prompt_id.cpu()
        for key, k, n in zip(ids.tolist(), succ.tolist(), count.tolist()):
            zero_var = k == 0 or k == n  # every row 0, or every row 1 (successes are in [0, 1])
            self.streak[key] = self.streak.get(key, 0) + 1 if zero_var else 0
            self.gate(key, self.gate_after > 0 and self.streak[key] >= self.gate_after)
            correct = (pid == key) & (s >= 1.0)
            if correct.any():
                self.pred_len[key] = float(lengths[correct].mean())
        keep_rows = informative_groups(batch.scalar_rewards().cpu(), batch.group.cpu()) if self.filter_zero_variance else None
        metrics = {
            "sampler/masa/filtered_rows_frac": int((~keep_rows).sum()) / max(len(batch), 1) if keep_rows is not None else 0.0,
            "sampler/masa/cutoff_rows": float(cut.sum()) if cut is not None else 0.0,
            "sampler/masa/limited_prompts": float(limited),
            **self.draw_metrics("masa"),
        }
        return Feedback(metrics, keep_rows=keep_rows, keep_tokens=keep_tokens, zero_rewards=cut)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "streak": dict(self.streak), "pred_len": dict(self.pred_len)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.streak = {int(k): int(v) for k, v in state["streak"].items()}
        self.pred_len = {int(k): float(v) for k, v in state["pred_len"].items()}
