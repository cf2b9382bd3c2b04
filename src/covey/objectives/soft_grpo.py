"""`soft_grpo`: the policy-gradient loss on soft-thinking rollouts, with the Gumbel log-density as log-prob.

Paper: "SofT-GRPO: Surpassing Discrete-Token LLM Reinforcement Learning via Gumbel-Reparameterized
Soft-Thinking Policy Optimization" (arXiv 2511.06411). Checked against the released code:
zz1358m/SofT-GRPO-master @ 2b9d8ec6d8f022f2aefe7a1c2512dcb9924cddfe
(`verl-0.4.x/verl/workers/actor/dp_actor.py::_forward_micro_batch`,
`verl-0.4.x/verl/utils/torch_functional.py::logprobs_from_logits_topk_gumbel`, `SofT-GRPO-deepscaler-8k.sh`).

The rows come from `rollout.strategy: soft_thinking` and carry their soft tokens. The learner's forward feeds
each completion position's input as the mixture the engine fed (sum_k softmax(g / tau_g)_k E[id_k], detached, as
released: the gradient reaches the policy only through its logits), and the log-prob of a soft position is the
Gumbel log-density of its stored scores under the current logits (`covey.engine.soft.soft_token_logprob`); a
position after the thinking span keeps its token's ordinary log-prob. Everything else is the run's
policy-gradient loss (the algorithm axes: GRPO advantages, the PPO clip). pi_old, when it is recomputed, is
computed the same way.

Departures: the released actor's KL loss (k = low_var_kl, coef 0.001) compares with the reference's soft
log-densities; covey does not compute reference log-probs of soft tokens, so `algo.kl` in loss mode is refused.
Without flash-attn the released `logprobs_from_logits_topk_gumbel` silently falls back to ordinary token
log-probs; covey always uses the Gumbel form.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from covey.engine.soft import soft_token_logprob, soft_weights
from covey.learner.objective import ObjectiveCaps, register_objective
from covey.learner.policy_loss import PolicyLoss
from covey.rollouts import Rollouts

__all__ = ["SoftGRPO", "soft_logprobs"]


def soft_logprobs(model, batch: Rollouts, *, temperature: float, tau: float) -> Tensor:
    """[N, T] log-probs of soft-thinking rows under `model` (module docstring); 0 on padding."""
    emb = model.get_input_embeddings().weight
    dev = emb.device
    n, t = batch.completion_ids.shape
    lengths = batch.lengths.tolist()
    seqs = []
    for i in range(n):
        p = batch.prompt_ids[i].to(dev)
        ids, sc = batch.soft_ids[i].to(dev), batch.soft_scores[i].to(dev)
        soft = (ids[:, 1:] != 0).any(-1)
        w = torch.where(soft[:, None], soft_weights(sc, tau), torch.nn.functional.one_hot(torch.zeros_like(ids[:, 0]), ids.shape[1]).float())
        comp = (w[..., None] * emb[ids].float()).sum(1).to(emb.dtype)  # [L, H]: the engine's input mixtures
        seqs.append(torch.cat([emb[p], comp]).detach())
    width = max(len(s) for s in seqs)
    x = torch.zeros(n, width, emb.shape[1], dtype=emb.dtype, device=dev)
    att = torch.zeros(n, width, dtype=torch.long, device=dev)
    for i, s in enumerate(seqs):
        x[i, : len(s)], att[i, : len(s)] = s, 1
    logits = model(inputs_embeds=x, attention_mask=att).logits.float() / temperature  # [N, S, V]
    out = torch.zeros(n, t, device=dev)
    for i in range(n):
        pl, k = len(batch.prompt_ids[i]), lengths[i]
        if k == 0:
            continue
        lg = logits[i, pl - 1 : pl - 1 + k]  # the positions that predict the completion
        ids, sc = batch.soft_ids[i].to(dev), batch.soft_scores[i].to(dev)
        soft = (ids[:, 1:] != 0).any(-1)
        hard = torch.log_softmax(lg, -1).gather(-1, batch.completion_ids[i, :k, None].to(dev))[:, 0]
        out[i, :k] = torch.where(soft, soft_token_logprob(lg, ids, sc), hard)
    return out


def _check(cfg) -> None:
    from covey.strategies import STRATEGIES

    if cfg.rollout.strategy.name != "soft_thinking":
        raise ValueError("algo.objective 'soft_grpo' scores soft tokens: set rollout.strategy: soft_thinking")
    kl = cfg.algo.active().get("kl")
    if kl is not None and kl.mode == "loss":
        raise ValueError("algo.objective 'soft_grpo': a KL loss needs the reference's log-densities of the soft tokens, which "
                         "covey does not compute; set algo.kl: null (or mode: reward)")  # fmt: skip
    needs = cfg.algo.requires()
    if cfg.algo.entropy_coef or any(r.startswith("stat:") or r == "entropies" for r in needs) or cfg.algo.likelihood is not None:
        raise ValueError("algo.objective 'soft_grpo' computes soft-token log-densities only: no entropy bonus, logit "
                         "statistics or likelihood estimator")  # fmt: skip
    STRATEGIES.get("soft_thinking")  # registered


@register_objective("soft_grpo", paper="SofT-GRPO: Surpassing Discrete-Token LLM Reinforcement Learning via "
                    "Gumbel-Reparameterized Soft-Thinking Policy Optimization", arxiv="2511.06411",
                    caps=ObjectiveCaps(check_run=_check))  # fmt: skip
class SoftGRPO(PolicyLoss):
    """The run's policy-gradient loss with soft-token log-probs (module docstring)."""

    def __init__(self, cfg, policy, device):
        super().__init__(cfg.algo, max_new_tokens=cfg.sampling.max_new_tokens, skip_zero_advantage=cfg.optim.skip_zero_advantage)
        self.tau = float(cfg.strategy_spec().params.get("gumbel_temperature", 0.1))

    def _logp(self, learner, batch: Rollouts) -> Tensor:
        if batch.soft_ids is None:
            raise ValueError("soft_grpo: the batch has no soft tokens (rollout.strategy soft_thinking)")
        with learner._ctx(learner.model):
            return soft_logprobs(learner.model, batch, temperature=learner.temperature, tau=self.tau)

    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts, dict[str, Tensor], dict[str, float]]:
        if (learner.recompute_old or batch.recompute_old_logprobs) and batch.old_logprobs is None:
            with torch.no_grad():
                old = torch.zeros_like(batch.completion_mask)
                for idx in learner._chunks(batch):
                    old[idx] = self._logp(learner, batch.select(idx)).float().to(old.device)
            batch.old_logprobs = old * batch.completion_mask
        return super().prepare(learner, batch, generator)

    def loss(self, learner, micro: Rollouts, mask: Tensor, totals: Any, extra: dict[str, Tensor], *,
             observe: bool = False, logp: Tensor | None = None, old: Tensor | None = None):  # fmt: skip
        if logp is None:
            logp = self._logp(learner, micro)
        return super().loss(learner, micro, mask, totals, extra, observe=observe, logp=logp, old=old)
