"""EPO's entropy regularization with an entropy-smoothing penalty against a per-turn history."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from covey.algos.regularizers.base import Regularizer, RegularizerCaps, register_regularizer
from covey.algos.registry import BatchTotals, LossInputs

NonNeg = Annotated[float, Field(ge=0.0)]


@register_regularizer(
    "epo",
    paper="EPO: Entropy-regularized Policy Optimization for LLM Agents Reinforcement Learning (VERIFIED-CODE; "
          "penalty with a gradient: covey option)",
    arxiv="2509.22576",
    requires=("stat:entropy",),
    caps=RegularizerCaps(entropy_bonus=True),
)  # fmt: skip
class EPO(Regularizer):
    """EPO: an entropy bonus minus an entropy-smoothing penalty that holds each turn's entropy near its
    historical average. Returns [N, T] (reduced with the policy loss's aggregation, as verl's agg_loss).

    Checked against WujiangXu/EPO @ 5b6fa98e034639b95afbfb24f98d1cb1e5197542 (`verl/workers/actor/dp_actor.py` `update_policy`,
    `generate_entropy_penalty`; `verl/trainer/ppo/ray_trainer.py` entropy_history; defaults
    `examples/general_running_server.sh`):

        Hbar_k  = mean over past training steps of the step's mean entropy at agent turn k
        band    = (min_ratio Hbar_k, max_ratio Hbar_k)        per token (level="token") or on the
                                                              row's mean entropy (level="seq")
        P_t     = out_range_penalty * 1[H_t outside the band]                  (penalty="released")
        loss_t  = -coef * (H_t - smooth_coef * P_t)

    The released script ships with `entropy_smooth=False`: the default ``smooth=False`` is the plain
    entropy bonus (EPO's first mechanism, verl entropy_coeff). With ``smooth=True`` the default
    ``penalty="released"`` is the released constant mask (torch.where(in_band, 0, 0.1)): it changes the
    logged loss but not the gradient. ``penalty="deviation"`` (covey's default before round two) is
    covey's reading of the paper's "penalizes deviations from historical averages": P_t =
    out_range_penalty * 1[out of band] * |H_t - Hbar_k|, which pulls out-of-band entropy back toward
    the band. UNVERIFIED against the paper.

    covey's choices (documented departures): the history is kept per turn index with its own count
    (the released trainer left-pads short step lists with zeros and averages them in); it is the
    current-policy entropy measured in the update, folded in after each training step (the released
    one is measured during the rollout of the same step); a row's turn is `LossInputs.turn` (0 for
    single-turn rows); the smoothing applies to tokens of turns >= from_turn (the released code
    applies it to a whole micro-batch once any of its rows is from turn >= max_steps // 2). No history
    yet (the first step): no penalty. The adaptive phase weight (`enable_smooth_weights`, off in the
    scripts) is not built. Defaults: coef 0.001, min/max ratio 0.5/1.5, smooth_coef 1.0,
    out_range_penalty 0.1 (script). The history is saved in checkpoints.
    Metrics: entropy, out_of_band_frac, penalty (mean P over tokens).
    """

    def __init__(
        self,
        *,
        coef: NonNeg = 0.001,
        smooth: bool = False,
        smooth_coef: NonNeg = 1.0,
        min_ratio: NonNeg = 0.5,
        max_ratio: NonNeg = 1.5,
        out_range_penalty: NonNeg = 0.1,
        penalty: Literal["released", "deviation"] = "released",
        level: Literal["token", "seq"] = "token",
        from_turn: Annotated[int, Field(ge=0)] = 0,
    ):
        if min_ratio > max_ratio:
            raise ValueError(f"regularizer 'epo': min_ratio={min_ratio} must be <= max_ratio={max_ratio}")
        self.coef, self.smooth, self.smooth_coef = coef, smooth, smooth_coef
        self.lo, self.hi, self.p, self.penalty, self.level, self.from_turn = min_ratio, max_ratio, out_range_penalty, penalty, level, from_turn
        self.hist_sum: dict[int, float] = {}  # turn -> sum over steps of the step's mean entropy
        self.hist_cnt: dict[int, int] = {}  # turn -> number of steps
        self._step_sum: dict[int, float] = {}  # this training step: turn -> entropy sum, token count
        self._step_cnt: dict[int, float] = {}

    def _turns(self, inp: LossInputs) -> torch.Tensor:
        return inp.turn.clamp(min=0).long() if inp.turn is not None else torch.zeros_like(inp.mask, dtype=torch.long)

    def history(self, turns: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """(Hbar [same shape], known [bool]) for a tensor of turn indices."""
        keys = sorted(self.hist_cnt)
        hbar = torch.zeros(turns.shape, dtype=dtype, device=turns.device)
        known = torch.zeros(turns.shape, dtype=torch.bool, device=turns.device)
        for k in keys:
            at = turns == k
            hbar = torch.where(at, torch.tensor(self.hist_sum[k] / self.hist_cnt[k], dtype=dtype, device=turns.device), hbar)
            known |= at
        return hbar, known

    def __call__(self, inp: LossInputs, totals: BatchTotals):
        if inp.entropy is None:
            raise ValueError("regularizer 'epo' needs LossInputs.entropy (the learner computes it when 'stat:entropy' is required)")
        h, m = inp.entropy, inp.mask
        turns = self._turns(inp)
        hd = h.detach()
        for k in torch.unique(turns[m > 0]).tolist():  # this step's per-turn entropy, for the history
            at = (turns == k) & (m > 0)
            self._step_sum[k] = self._step_sum.get(k, 0.0) + float(hd[at].sum())
            self._step_cnt[k] = self._step_cnt.get(k, 0.0) + float(at.sum())
        pen = torch.zeros_like(h)
        out = torch.zeros_like(m, dtype=torch.bool)
        if self.smooth and self.hist_cnt:
            hbar, known = self.history(turns, h.dtype)
            length = m.sum(-1, keepdim=True).clamp(min=1.0)
            value = hd if self.level == "token" else ((hd * m).sum(-1, keepdim=True) / length).expand_as(hd)
            out = known & (turns >= self.from_turn) & (m > 0) & ~((value > self.lo * hbar) & (value < self.hi * hbar))
            if self.penalty == "released":
                pen = self.p * out.to(h.dtype)
            else:
                dev = (h - hbar).abs() if self.level == "token" else ((h * m).sum(-1, keepdim=True) / length - hbar).abs()
                pen = self.p * out.to(h.dtype) * dev
        reg = -self.coef * (h - self.smooth_coef * pen)
        n = m.sum().clamp(min=1.0)
        metrics = {"entropy": float((hd * m).sum() / n), "out_of_band_frac": float((out.float() * m).sum() / n),
                   "penalty": float((pen.detach() * m).sum() / n)}  # fmt: skip
        return reg, metrics

    def after_update(self) -> dict[str, float]:
        for k, s in self._step_sum.items():
            self.hist_sum[k] = self.hist_sum.get(k, 0.0) + s / max(self._step_cnt[k], 1.0)
            self.hist_cnt[k] = self.hist_cnt.get(k, 0) + 1
        self._step_sum, self._step_cnt = {}, {}
        return {"history_turns": float(len(self.hist_cnt))}

    def state_dict(self):
        return {"hist_sum": dict(self.hist_sum), "hist_cnt": dict(self.hist_cnt)}

    def load_state_dict(self, state):
        self.hist_sum = {int(k): float(v) for k, v in state.get("hist_sum", {}).items()}
        self.hist_cnt = {int(k): int(v) for k, v in state.get("hist_cnt", {}).items()}
