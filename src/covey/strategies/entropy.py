"""Entropy-steering rollout strategies with a checkpointed entropy controller: `dcpo`, `aepo_entropy`.

Both papers steer the policy's entropy toward a target H0 with the same controller (597358816/DCPO
@ 33f8073e302db6cc04a1e064df89242ba8f236b0, `verl/trainer/ray_trainer.py::fit`, branches `alg == "DCPO"` / `"AEPO"`; the
authors' AEPO repository runs the same trainer):

    H_hat = -mean(log-prob of the sampled tokens) of the previous update   (0 before the first)
    T     = t_high if H_hat <= H0 else t_low

covey estimates H_hat from the previous step's batch: -token-mean(behaviour log-probs). On-policy
with one update per batch that is the code's value up to its mean of micro-batch means (a
documented departure). The controller's state is saved in checkpoints with the strategy.

`dcpo`          "Distribution-Centric Policy Optimization" (arXiv 2601.12730): the step's groups
                as `group` samples them; the batch carries `controller` = {h_hat, h0,
                probe_temperature: T}; the trainer fills `probe_logprobs` (pi_old at T) for the
                `dcpo` estimator.
`aepo_entropy`  "Arbitrary Entropy Policy Optimization" (arXiv 2510.08141): an extra rollout of the
                first floor(B/4) prompts at temperature T; its rows with GRPO advantage > 0.05
                (at most `reinforce_sample_num`, halved when H_hat > H0) join the batch with a fixed
                advantage 1 (`Rollouts.fixed_advantage`, read by the `aepo_entropy` estimator).
                `mode: replace` (default, the released code): they replace the batch's first k
                rows, and the rows kept keep the GRPO advantages of their FULL groups (the released
                trainer runs `_compute_adv` on the whole batch before `DataProto.concat([reinforce[:k],
                batch[k:]])`), so the strategy fixes those too. `mode: append` (covey's earlier
                default) adds them and loses no row.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch

from covey.algos.advantages._groups import group_normalise, groups_of
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.strategies.group import sample_groups

__all__ = ["AEPOEntropy", "DCPOStrategy", "EntropyController", "token_entropy_estimate"]


def token_entropy_estimate(batch: Rollouts) -> float:
    """-token-mean of the sampled tokens' behaviour log-probs (0 for a batch with no token)."""
    m = batch.completion_mask.double()
    total = float(m.sum())
    return -float((batch.behaviour_logprobs.double() * m).sum()) / total if total > 0 else 0.0


class EntropyController:
    """H_hat (the last entropy estimate, 0 at the start) against the target h0; picks a temperature."""

    def __init__(self, h0: float, t_high: float, t_low: float):
        if h0 < 0 or t_high <= 0 or t_low <= 0:
            raise ValueError(f"entropy controller: h0 must be >= 0 and temperatures > 0, got {h0}, {t_high}, {t_low}")
        self.h0, self.t_high, self.t_low = h0, t_high, t_low
        self.h_hat = 0.0

    def temperature(self) -> float:
        return self.t_high if self.h_hat <= self.h0 else self.t_low

    def info(self) -> dict[str, float]:
        return {"h_hat": self.h_hat, "h0": self.h0, "probe_temperature": self.temperature()}

    def observe(self, batch: Rollouts) -> None:
        self.h_hat = token_entropy_estimate(batch)

    def state_dict(self) -> dict[str, Any]:
        return {"h_hat": self.h_hat}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.h_hat = float(state.get("h_hat", 0.0))


def _metrics(info: dict[str, float], prefix: str) -> dict[str, float]:
    return {f"{prefix}/h_hat": info["h_hat"], f"{prefix}/temperature": info["probe_temperature"]}


@register_strategy("dcpo")
class DCPOStrategy:
    """DCPO's rollout: i.i.d. groups plus the entropy controller (see the module docstring).

    h0:      target entropy (`entropy_base`; the script's 0.5, the README's best 0.25).
    t_high:  probe temperature when H_hat <= h0 (1.2); t_low otherwise (0.8).
    """

    caps = StrategyCaps(provides=("probe_temperature",))

    def __init__(self, *, h0: float = 0.5, t_high: float = 1.2, t_low: float = 0.8):
        self.ctl = EntropyController(h0, t_high, t_low)

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        batch = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0))
        batch.controller = self.ctl.info()
        self.ctl.observe(batch)  # the next step's H_hat
        return batch, _metrics(batch.controller, "dcpo")

    def state_dict(self) -> dict[str, Any]:
        return self.ctl.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ctl.load_state_dict(state)


@register_strategy("aepo_entropy")
class AEPOEntropy:
    """AEPO's rollout: the step's groups plus REINFORCE rows sampled at the controller's temperature.

    h0, t_high, t_low:     the entropy controller (0.5, 1.2, 0.8).
    reinforce_sample_num:  most REINFORCE rows per step (60), halved when H_hat > h0.
    extra_prompts:         prompts re-sampled at T (None: floor(B / 4) of the step's B, the code).
    threshold:             a re-sampled row is kept when its GRPO advantage (in its group) > threshold (0.05).
    mode:                  "replace" the batch's first k rows (default, the released code; the rows kept
                           keep their full-group GRPO advantages) or "append" the rows (covey's variant).
    """

    caps = StrategyCaps(provides=("reinforce_rows",))

    def __init__(self, *, h0: float = 0.5, t_high: float = 1.2, t_low: float = 0.8, reinforce_sample_num: int = 60,
                 extra_prompts: int | None = None, threshold: float = 0.05,
                 mode: Literal["append", "replace"] = "replace"):  # fmt: skip
        if reinforce_sample_num < 0 or (extra_prompts is not None and extra_prompts < 0):
            raise ValueError("rollout strategy aepo_entropy: reinforce_sample_num and extra_prompts must be >= 0")
        if mode not in ("append", "replace"):
            raise ValueError(f"rollout strategy aepo_entropy: mode must be 'append' or 'replace', got {mode!r}")
        self.ctl = EntropyController(h0, t_high, t_low)
        self.k_max, self.extra, self.threshold, self.mode = reinforce_sample_num, extra_prompts, threshold, mode

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = ctx.sampling(0)
        main = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, sp)
        metrics = dict(ctx.score(main))
        info = self.ctl.info()
        n_extra = len(items) // 4 if self.extra is None else min(self.extra, len(items))
        picked = None
        if n_extra and self.k_max:
            extra = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws[:n_extra],
                                  dataclasses.replace(ctx.sampling(1), temperature=info["probe_temperature"]))  # fmt: skip
            ctx.score(extra)
            keep = torch.nonzero(_grpo(extra) > self.threshold).flatten()
            k = min(self.k_max, len(keep))
            if info["h_hat"] > info["h0"]:
                k //= 2
            if k:
                picked = select_reinforce_rows(extra, keep[:k], int(main.group.max()) + 1)
        self.ctl.observe(main)  # the next step's H_hat, from the rows sampled at the run's temperature
        k = 0 if picked is None else len(picked)
        batch = main
        if picked is not None and self.mode == "replace":  # the rows kept keep their full groups' advantages
            main.fixed_advantage = _grpo(main).float()
            batch = Rollouts.concat([picked, main.select(torch.arange(k, len(main)))])
        elif picked is not None:
            main.fixed_advantage = torch.full((len(main),), float("nan"))
            batch = Rollouts.concat([main, picked])
        if picked is not None:
            batch.recompute_old_logprobs = True  # REINFORCE rows were sampled at T; their pi_old is at the run's temperature
        batch.controller = info
        metrics.update({**_metrics(info, "aepo"), "aepo/reinforce_rows": float(k), "aepo/extra_prompts": float(n_extra)})
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return self.ctl.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ctl.load_state_dict(state)


def _grpo(batch: Rollouts) -> torch.Tensor:
    """[N] float64: GRPO of the batch's scalar rewards in their groups (eps 1e-6, unbiased std), the
    released trainer's `_compute_adv` (verl `compute_grpo_outcome_advantage`)."""
    return group_normalise(batch.scalar_rewards().double(), groups_of(batch), eps=1e-6, scale="group", singleton="zero")


def select_reinforce_rows(extra: Rollouts, rows: torch.Tensor, first_group: int) -> Rollouts:
    """`rows` of the re-sampled batch as REINFORCE rows: fixed advantage 1, each in a group of its own
    (ids from `first_group` on), so no group statistic of the main batch sees them."""
    picked = extra.select(rows)
    picked.group = torch.arange(first_group, first_group + len(picked), dtype=torch.long)
    picked.fixed_advantage = torch.ones(len(picked))
    return picked
