"""`hapo_temperature`: HAPO's entropy-adaptive sampling temperature, one temperature per token.

Paper: "Heterogeneous Adaptive Policy Optimization: Tailoring Optimization to Every Token's Nature"
(HAPO), arXiv 2509.16591. Checked against starriver030515/HAPO @ 7671dde3e268779a949954ec75ed3edda45f7e0a
(`vllm/v1/sample/sampler.py::compute_entropy_based_temperature`, `verl/trainer/ppo/core_algos.py::
compute_entropy_h` for the normalisation, `verl/trainer/ppo/ray_trainer.py` L1026 for the statistics).
The normalisation is the HAPO surrogate's (`covey.algos.surrogates.hapo_entropy_stats` /
`hapo_h_hat`, one home):

    at each decode step, per row:  H_t = entropy of softmax(z_t / T)     (T = sampling.temperature)
                                   h_hat_t = hapo_h_hat(H_t, stats)       stats (m, rms, pos, neg) of the
                                                                          PREVIOUS step's token entropies
                                   T_t = T (1 + tau clamp(h_hat_t, -1, 1))
    first step (no statistics yet): T_t = T

The default `signed: false` is the released rule: there `h_hat = h * (1 / neg)` with `neg < 0`, so h_hat
is >= 0 for every token and the temperature never goes below T (the same default as the `hapo`
surrogate). `signed: true` is covey's earlier default, the abstract's reading (h_hat in [-1, 1]:
low-entropy tokens sampled cooler, high-entropy ones hotter). The engine returns the log-probs of the
distribution it sampled from (at T_t), so the batch asks the learner to recompute pi_old at T (as
verl always does). covey's statistics are those of the previous step's base-temperature entropies as
the sampler saw them: the engine's at the first step, afterwards the rule's own H(softmax(z / T)) of
every decoded position (rows that stopped but are still decoded until the engine compacts them
included). HAPO takes the actor's old-log-prob entropies of the sampled tokens: a documented departure. State (the
statistics) is saved in checkpoints with the strategy. Needs an engine with per-token temperature rules
(`torch`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from covey.algos.surrogates import hapo_entropy_stats, hapo_h_hat
from covey.engine.base import TemperatureRuleEngine
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.strategies.group import sample_groups

__all__ = ["EntropyTemperature", "HAPOTemperature"]


class EntropyTemperature:
    """`rule(logits [B, V]) -> [B]`: T (1 + tau clamp(h_hat(H(softmax(z / T))), -1, 1))."""

    def __init__(self, base: float, tau: float, stats: tuple[float, float, float, float], signed: bool):
        self.base, self.tau, self.stats, self.signed = base, tau, stats, signed
        self.applied: list[Tensor] = []  # the temperatures of each call (rows decoded at that step)
        self.entropies: list[Tensor] = []  # H at the base temperature T of the same positions

    def entropy_temperature(self, entropy: Tensor) -> Tensor:
        return self.base * (1.0 + self.tau * hapo_h_hat(entropy, self.stats, self.signed).clamp(-1.0, 1.0))

    def __call__(self, logits: Tensor) -> Tensor:
        logp = torch.log_softmax(logits.float() / self.base, -1)
        entropy = -(logp.exp() * logp).sum(-1)
        temps = self.entropy_temperature(entropy)
        self.applied.append(temps.detach().cpu())
        self.entropies.append(entropy.detach().cpu())
        return temps


@register_strategy("hapo_temperature")
class HAPOTemperature:
    """i.i.d. groups sampled with HAPO's per-token temperature (see the module docstring).

    tau:     temperature swing (the recipe's `temperature_tau` 0.05).
    pivot:   entropy quantile of the normalisation (`entropy_pivot` 0.8).
    signed:  False (released, default): h_hat >= 0, so no token samples cooler than T;
             True (covey's earlier default, the abstract's reading): h_hat in [-1, 1].
    """

    caps = StrategyCaps(engine_protocols=(TemperatureRuleEngine,))

    def __init__(self, *, tau: float = 0.05, pivot: float = 0.8, signed: bool = False):
        if not 0.0 <= tau < 1.0 or not 0.0 <= pivot <= 1.0:
            raise ValueError(f"rollout strategy hapo_temperature: tau must be in [0, 1) and pivot in [0, 1], got {tau}, {pivot}")
        self.tau, self.pivot, self.signed = tau, pivot, signed
        self.stats: tuple[float, float, float, float] | None = None

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        sp = dataclasses.replace(ctx.sampling(0), return_entropies=True)
        rule = None if self.stats is None else EntropyTemperature(sp.temperature, self.tau, self.stats, self.signed)
        batch = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, dataclasses.replace(sp, temperature_rule=rule))
        metrics = {"hapo/adaptive": float(rule is not None)}
        if rule is not None and rule.applied:
            temps = torch.cat(rule.applied)  # every decoded position (incl. rows still decoding after their stop)
            metrics.update({"hapo/temperature_mean": float(temps.mean()), "hapo/temperature_min": float(temps.min()),
                            "hapo/temperature_max": float(temps.max())})  # fmt: skip
        if rule is not None:
            batch.recompute_old_logprobs = True  # behaviour log-probs are at T_t; pi_old at T for the ratio
        if rule is None:  # sampled at T: the engine's entropies are the base distribution's
            self.stats = hapo_entropy_stats(batch.entropies, batch.completion_mask, self.pivot) or self.stats
        elif rule.entropies:  # sampled at T_t: the base-temperature entropies the rule computed
            h = torch.cat(rule.entropies)
            self.stats = hapo_entropy_stats(h, torch.ones_like(h), self.pivot) or self.stats
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"stats": None if self.stats is None else list(self.stats)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        stats = state.get("stats")
        self.stats = None if stats is None else tuple(float(x) for x in stats)
