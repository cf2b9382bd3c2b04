"""`direct_advantage_provisional`: Direct Advantage Policy Optimization on offline step-level data.

Paper: "Direct Advantage Policy Optimization" (step-level offline RL for reasoning, arXiv 2412.18279; covey
names it `direct_advantage`, since `dapo` is the Decoupled-clip / Dynamic-sampling preset). RECONSTRUCTED:
no code was found (searched); the TL;DR and the abstract give the mechanism: a critic,
trained first and apart, predicts the success probability of partial solutions; for states s and candidate
next steps a_k ~ pi_ref the step advantages are A(s, a_k) = V(s + a_k) - V(s); the actor is trained offline
with a quadratic loss aligning scaled log-policy ratios with those advantages:

    loss = mean over (s, a_k) of ( beta [log pi_theta(a_k | s) - log pi_ref(a_k | s)] - A(s, a_k) )^2

log pi(a | s) is the step's sequence log-prob (the sum over its tokens), at temperature 1. The scaling and
normalisation are UNVERIFIED (beta 0.1 is covey's default). The data (states, candidates, advantages)
come from `scripts/direct_advantage_data.py` (`covey.objectives.step_data`: MC values of a policy's partial
solutions, the critic fitted to them, candidates sampled from the policy, advantages from the critic) and
reach the learner through `rollout.strategy: offline_steps` (no generation during training).

Test vector (hand-computed): beta 0.1, log pi_theta [-2.0, -3.0, -1.5], log pi_ref [-2.2, -2.8, -1.5],
A [0.3, -0.2, 0] -> mean((0.02 - 0.3)^2, (-0.02 + 0.2)^2, 0^2) = 0.0369.
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import Field
from torch import Tensor

from covey.learner.objective import Objective, ObjectiveCaps, Step, register_objective
from covey.rollouts import Rollouts

__all__ = ["DirectAdvantage", "direct_advantage_loss"]


def direct_advantage_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, advantage: Tensor, beta: float) -> tuple[Tensor, Tensor]:
    """([N] squared errors (beta * sequence log-ratio - A)^2, [N] sequence log-ratios) of [N, T] log-probs."""
    ratio = ((logp - ref_logp) * mask).sum(-1)
    return (beta * ratio - advantage).pow(2), ratio


def _check(cfg) -> None:
    from covey.tasks import get_task

    if cfg.rollout.strategy.name != "offline_steps":
        raise ValueError("algo.objective 'direct_advantage_provisional' trains on offline step data: set rollout.strategy: "
                         "offline_steps and a dataset of states, candidate steps and their critic advantages "
                         "(scripts/direct_advantage_data.py builds one and trains the critic)")  # fmt: skip
    params = cfg.rollout.strategy.params
    adv_key = params.get("advantages_key", "advantages")
    rows = get_task(cfg.task.name, **cfg.task.params).examples(cfg.task.split)
    missing = [i for i, it in enumerate(rows) if not isinstance(it.get(adv_key), list)]
    if missing:
        raise ValueError(f"algo.objective 'direct_advantage_provisional' needs a critic's advantages, and {len(missing)} of "
                         f"{len(rows)} rows have no {adv_key!r} list (first: row {missing[0]}): build the data with "
                         "scripts/direct_advantage_data.py, which trains the critic")  # fmt: skip


@register_objective("direct_advantage_provisional", paper="Direct Advantage Policy Optimization", arxiv="2412.18279",
                    caps=ObjectiveCaps(check_run=_check))  # fmt: skip
class DirectAdvantage(Objective):
    """The quadratic loss of scaled step log-ratios against critic advantages (module docstring).

    beta: the scale of the log-ratio (> 0).
    """

    requires = frozenset({"ref_logprobs"})
    uses_advantages = False
    temperature = 1.0

    def __init__(self, cfg, policy, device, *, beta: Annotated[float, Field(gt=0)] = 0.1):
        self.beta = float(beta)

    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts | None, dict[str, Tensor], dict[str, float]]:
        a = batch.fixed_advantage
        if a is None or not bool(torch.isfinite(a).all()):
            raise ValueError("direct_advantage_provisional: every row needs its advantage (rollout.strategy offline_steps)")
        if batch.ref_logprobs is None:
            raise ValueError("direct_advantage_provisional: the batch needs ref_logprobs (the trainer fills them)")
        return batch, {"adv": a.float()}, {"da/adv_mean": float(a.mean()), "da/adv_abs_mean": float(a.abs().mean())}

    def begin_step(self, learner, mb: Rollouts, extra: dict[str, Tensor]) -> Step:
        return Step(mb, extra, learner._chunks(mb), totals=len(mb))

    def loss(self, learner, micro: Rollouts, mask: Tensor, totals: Any, extra: dict[str, Tensor], *,
             observe: bool = False, logp: Tensor | None = None,
             old: Tensor | None = None) -> tuple[Tensor | None, dict[str, tuple[float, float]]]:  # fmt: skip
        logp, _ = learner.logprobs(learner.model, micro)
        ref = micro.ref_logprobs.to(logp.device)
        err, ratio = direct_advantage_loss(logp.float(), ref, micro.completion_mask.to(logp.device), extra["adv"].to(logp.device), self.beta)
        n = float(len(micro))
        return err.sum() / totals, {"da/sq_error": (float(err.detach().mean()), n), "da/log_ratio": (float(ratio.detach().mean()), n)}
