"""`hnpg`: offline data enhanced on-policy policy gradient.

Paper: "Offline Data Enhanced On-Policy Policy Gradient with Provable Guarantees" (HNPG, arXiv 2311.08384).
Checked against the released code: YifeiZhou02/HNPG @ 7d7ace151c379497b0acc249ce8457b4e17b860d
(`trpo.py::TRPO.update_params`, `update_q`, `update_policy`; `models.py::QValue.get_value`; `utils.py`
defaults). Each update, with one horizon (a completion is one action; `rollout.strategy: hnpg_offline`
supplies the rows):

    critic Q(s, a):  `critic_steps` Adam steps (lr 3e-4, L2 `l2`) on
                     mean (Q(s, a) - r)^2 over on-policy rows  +  mean (Q(s, a) - r_logged)^2 over logged rows
                     (the last horizon's fitted-Q target is the reward itself)
    V(s):            the mean of Q over the policy's own completions at s (the released get_value averages
                     Q over 10 actions drawn from the policy; here the group's G completions)
    advantages:      on-policy rows   A = r - V(s)          (GAE with gamma 1 on one step)
                     offline samples  A = Q(s, a) - V(s)    (actions re-sampled from the policy at offline states)
                     logged rows      none: they only train the critic
    policy:          the run's policy-gradient loss (the algorithm axes) over the union of on-policy rows and
                     offline samples, as many of each (HNPG's weighting: the offline batch per horizon is as
                     large as the on-policy one, and the loss is one mean over their union)

Departure (partial): the released policy step is a natural-gradient (TRPO) step, conjugate gradient on the
Fisher-vector product with max KL 1e-2, damping 0.1 and a line search; covey takes the run's first-order
optimizer step on the same surrogate (its clip, `algo.surrogate`). The critic is a separate model (`ValueCritic`:
a copy of `critic_model`'s trunk and a linear head) trained inside each update, as the released code trains its
Q-network before each policy step.
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import Field
from torch import Tensor

from covey.learner.objective import ObjectiveCaps, register_objective
from covey.learner.policy_loss import PolicyLoss
from covey.objectives.critic import ValueCritic
from covey.rollouts import Groups, Rollouts

__all__ = ["HNPG", "hnpg_advantages"]


def hnpg_advantages(q: Tensor, reward: Tensor, group: Tensor, role: list[str]) -> Tensor:
    """[N] advantages: V(s) = mean Q over the group's non-logged rows; on-policy A = r - V, offline A = Q - V,
    logged 0. `role[i]` is "on", "offline" or "logged"."""
    acting = torch.tensor([r != "logged" for r in role])
    g = Groups.of(group)
    w = acting.double()
    v = (g.sum(q.double() * w) / g.sum(w).clamp(min=1))[g.index]
    on = torch.tensor([r == "on" for r in role])
    adv = torch.where(on, reward.double() - v, q.double() - v)
    return torch.where(acting, adv, torch.zeros_like(adv))


def _check(cfg) -> None:
    if cfg.rollout.strategy.name != "hnpg_offline":
        raise ValueError("algo.objective 'hnpg' mixes offline data into on-policy updates: set rollout.strategy: "
                         "{name: hnpg_offline, offline: path/to/offline.jsonl} ({prompt, completion, reward} rows)")  # fmt: skip
    if cfg.sampler_spec().name != "uniform":
        raise ValueError("algo.objective 'hnpg' adds offline rows that are no items of the sampler's dataset: use the "
                         f"uniform sampler (got sampler {cfg.sampler_spec().name!r})")  # fmt: skip


@register_objective("hnpg", paper="Offline Data Enhanced On-Policy Policy Gradient with Provable Guarantees", arxiv="2311.08384",
                    caps=ObjectiveCaps(check_run=_check))  # fmt: skip
class HNPG(PolicyLoss):
    """The policy-gradient loss on on-policy rows and critic-scored offline samples (module docstring).

    critic_model:  the critic's base model (default: the policy's `model.name`).
    critic_steps:  Adam steps on the critic per update (30, released).
    critic_lr:     its learning rate (3e-4, released).
    l2:            the critic's L2 penalty on its parameters (0, released).
    """

    uses_advantages = False

    def __init__(self, cfg, policy, device, *, critic_model: str = "", critic_steps: Annotated[int, Field(ge=1)] = 30,
                 critic_lr: Annotated[float, Field(gt=0)] = 3e-4, l2: Annotated[float, Field(ge=0)] = 0.0):  # fmt: skip
        super().__init__(cfg.algo, max_new_tokens=cfg.sampling.max_new_tokens, skip_zero_advantage=cfg.optim.skip_zero_advantage)
        self.critic = ValueCritic.from_name(critic_model or cfg.model.name, seed=cfg.seed).to(device)
        self.steps, self.lr, self.l2 = critic_steps, critic_lr, l2

    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts, dict[str, Tensor], dict[str, float]]:
        role = [(it or {}).get("hnpg_role", "on") for it in batch.items]
        lengths = batch.lengths.tolist()
        seqs = [p.tolist() + batch.completion_ids[i, :k].tolist() for i, (p, k) in enumerate(zip(batch.prompt_ids, lengths))]
        reward = batch.scalar_rewards().double()
        logged = torch.tensor([float(it.get("logged_reward", 0.0)) if r == "logged" else 0.0 for it, r in zip(batch.items, role)],
                              dtype=torch.float64)  # fmt: skip
        on = [i for i, r in enumerate(role) if r == "on"]
        off = [i for i, r in enumerate(role) if r == "logged"]
        fit_rows = on + off
        target = torch.cat([reward[on], logged[off]])
        weights = torch.cat([torch.full((len(on),), 1.0 / max(len(on), 1)), torch.full((len(off),), 1.0 / max(len(off), 1))])
        err = self.critic.fit([seqs[i] for i in fit_rows], target, steps=self.steps, lr=self.lr, l2=self.l2,
                              weights=weights, generator=generator)  # fmt: skip
        q = self.critic.values(seqs).double()
        batch.advantages = hnpg_advantages(q, reward, batch.group, role).float()
        batch.sample_mask = torch.tensor([0.0 if r == "logged" else 1.0 for r in role])
        batch, extra, metrics = super().prepare(learner, batch, generator)
        offline = [i for i, r in enumerate(role) if r == "offline"]
        metrics.update({"hnpg/critic_sq_error": err, "hnpg/q_mean": float(q.mean()),
                        "hnpg/adv_on_mean": float(batch.advantages[on].double().abs().mean()) if on else 0.0,
                        "hnpg/adv_offline_mean": float(batch.advantages[offline].double().abs().mean()) if offline else 0.0})  # fmt: skip
        return batch, extra, metrics

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "critic": self.critic.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state and "critic" in state:
            self.critic.load_state_dict(state["critic"])
