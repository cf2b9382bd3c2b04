"""`ctrls_provisional`: a latent state-transition module steers a frozen language model, trained by RL.

Paper: "CTRLS: Chain-of-Thought Reasoning via Latent State-Transition" (arXiv 2507.08182). RECONSTRUCTED: no
code was found (searched); confirmed by the abstract only: reasoning is an MDP over latent states; a transition
model gives reasoning actions as explicit probability distributions in a latent space; it is refined by on-policy
RL with epsilon-greedy exploration and an entropy regulariser, without fine-tuning the LLM. covey's reading:

    state s_t      the frozen LM's final hidden state at the last token of the context (prompt + steps so far)
    action a_t     one of K latent actions, each a fixed vector c_a of the embedding's size (random, seeded, at the
                   token embeddings' mean norm x `scale`), placed as an input vector before reasoning step t
                   (`rollout.strategy: ctrls_latent`, the engine's `generate_soft(lead=...)`)
    transition     pi_phi(a | s) = softmax(MLP_phi(s)); the behaviour is epsilon-greedy over it: with probability
                   epsilon a uniform action, else a draw from pi_phi
    update         REINFORCE on phi with GRPO's group-normalised outcome advantage A_i of the episode:
                   loss = -mean_i A_i sum_t log pi_phi(a_t | s_t) - beta mean_t H(pi_phi(. | s_t)); Adam on phi alone

The LM's weights never change (the learner takes no step: the objective updates its own module). What is not
confirmed and is covey's: the latent codebook (fixed, not learned), the state (last hidden state), the MLP, the
step segmentation (fixed token budgets), the behaviour mixture, REINFORCE with group-normalised advantages, the
ELBO analysis left out. PARTIAL beyond that: the latent action is context for its own step only (a later step's
context holds the earlier steps' tokens, not their latent vectors).
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import Field
from torch import Tensor, nn

from covey.learner.objective import Objective, ObjectiveCaps, register_objective
from covey.rollouts import Groups, Rollouts

__all__ = ["CTRLS", "ctrls_loss"]


def ctrls_loss(logits: Tensor, actions: Tensor, episode: Tensor, advantage: Tensor, beta: float) -> tuple[Tensor, Tensor]:
    """(loss, mean entropy): logits [M, K] of the M transitions, their actions [M], the episode (row) of each [M]
    and the episodes' advantages [N]: -mean_i A_i sum_{t in i} log pi(a_t | s_t) - beta mean_t H_t."""
    logp = torch.log_softmax(logits, -1)
    taken = logp.gather(-1, actions[:, None])[:, 0]
    per_row = torch.zeros(advantage.shape[0], dtype=logits.dtype, device=logits.device).index_add_(0, episode, taken)
    entropy = -(logp.exp() * logp).sum(-1)
    return -(advantage * per_row).mean() - beta * entropy.mean(), entropy.mean()


def _check(cfg) -> None:
    if cfg.rollout.strategy.name != "ctrls_latent":
        raise ValueError("algo.objective 'ctrls_provisional' trains the latent transitions its rollouts take: set "
                         "rollout.strategy: ctrls_latent")  # fmt: skip
    if cfg.runtime.executor != "inline":
        raise ValueError("algo.objective 'ctrls_provisional' samples latent actions during the rollout: runtime.executor inline")


@register_objective("ctrls_provisional", paper="CTRLS: Chain-of-Thought Reasoning via Latent State-Transition", arxiv="2507.08182",
                    caps=ObjectiveCaps(check_run=_check))  # fmt: skip
class CTRLS(Objective):
    """The latent transition module and its REINFORCE update; the LM stays frozen (module docstring).

    latents: K, the latent actions.  epsilon: the uniform share of the behaviour.  beta: the entropy weight.
    lr: Adam's step on the module.  hidden: the MLP's width.  scale: the latent vectors' norm / the embeddings' mean norm.
    """

    uses_advantages = False

    def __init__(self, cfg, policy, device, *, latents: Annotated[int, Field(ge=2)] = 8,
                 epsilon: Annotated[float, Field(ge=0, le=1)] = 0.1, beta: Annotated[float, Field(ge=0)] = 0.01,
                 lr: Annotated[float, Field(gt=0)] = 1e-3, hidden: Annotated[int, Field(ge=1)] = 64,
                 scale: Annotated[float, Field(gt=0)] = 1.0):  # fmt: skip
        emb = policy.get_input_embeddings().weight.detach().float()
        h = emb.shape[1]
        gen = torch.Generator().manual_seed(int(cfg.seed))
        self.module = nn.Sequential(nn.Linear(h, hidden), nn.Tanh(), nn.Linear(hidden, latents))
        with torch.no_grad():
            for p in self.module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            codes = torch.randn(latents, h, generator=gen)
            self.codes = codes / codes.norm(dim=-1, keepdim=True) * emb.norm(dim=-1).mean() * scale
        self.opt = torch.optim.Adam(self.module.parameters(), lr=lr)
        self.k, self.epsilon, self.beta, self.seed = latents, epsilon, beta, int(cfg.seed)
        self.calls = 0

    # -------------------------------------------------------------- asked by the ctrls_latent strategy
    def act(self, states: Tensor) -> Tensor:
        """[B] latent actions for states [B, H]: epsilon uniform, else drawn from pi_phi (seeded per call)."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.calls)
        self.calls += 1
        with torch.no_grad():
            probs = torch.softmax(self.module(states.float()), -1)
        drawn = torch.multinomial(probs, 1, generator=gen)[:, 0]
        uniform = torch.randint(self.k, (len(states),), generator=gen)
        explore = torch.rand(len(states), generator=gen) < self.epsilon
        return torch.where(explore, uniform, drawn)

    def latent_vectors(self, actions: Tensor) -> Tensor:
        return self.codes[actions]

    # -------------------------------------------------------------- the update: the module only
    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts | None, dict[str, Tensor], dict[str, float]]:
        steps = [it.get("ctrls") for it in batch.items]
        if any(s is None for s in steps):
            raise ValueError("ctrls_provisional: the rows carry no latent transitions (rollout.strategy ctrls_latent)")
        r = batch.scalar_rewards().double()
        g = Groups.of(batch.group)
        adv = torch.where(g.size[g.index] > 1, (r - g.mean(r)[g.index]) / (g.std(r)[g.index] + 1e-6), torch.zeros_like(r)).float()
        states = torch.cat([s["states"] for s in steps]).float()
        actions = torch.cat([s["actions"] for s in steps])
        episode = torch.cat([torch.full((len(s["actions"]),), i, dtype=torch.long) for i, s in enumerate(steps)])
        self.opt.zero_grad()
        loss, entropy = ctrls_loss(self.module(states), actions, episode, adv, self.beta)
        loss.backward()
        self.opt.step()
        usage = torch.bincount(actions, minlength=self.k).double() / len(actions)
        return None, {}, {"ctrls/loss": float(loss.detach()), "ctrls/entropy": float(entropy.detach()),
                          "ctrls/adv_abs_mean": float(adv.abs().mean()), "ctrls/latents_used": float((usage > 0).sum())}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"module": self.module.state_dict(), "opt": self.opt.state_dict(), "codes": self.codes.clone(), "calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and "module" in state:
            self.module.load_state_dict(state["module"])
            self.opt.load_state_dict(state["opt"])
            self.codes, self.calls = state["codes"].clone(), int(state["calls"])
