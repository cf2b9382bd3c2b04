"""`essa_provisional`: gradient-free alignment by evolution strategies over the singular values of LoRA adapters.

Paper: "ESSA: Evolutionary Strategies for Scalable Alignment" (arXiv 2507.04453). RECONSTRUCTED: no code was
found (searched); confirmed by the abstract and summaries: after a supervised warm start, each LoRA adapter is
decomposed by SVD and only its singular values are searched, with CMA-ES, from forward passes alone; the fitness
is the task reward of the model's outputs. covey's form:

    per LoRA module (scale s_m, adapter B A):  B A = U diag(s) V^T   (rank r; U, V fixed at the start)
    theta = the singular values of every module, concatenated      (dimension r x modules)
    a candidate theta_k sets B = U diag(theta_k), A = V^T           (the weight W + s_m U diag(theta_k) V^T)
    each step: CMA-ES (`covey.objectives.cmaes`, Hansen's defaults) asks lambda candidates; the `es_population`
    strategy rolls each out through the engine on the step's prompts (the same prompts for all) and the run's
    rewards score them; fitness_k = mean scalar reward of candidate k's rows; CMA-ES is told; the policy's
    adapters are set to the new mean, which the trainer then syncs to the engine. No gradient, no optimizer step.

An adapter that is still zero (no warm start: peft initialises B to 0) has no singular directions: U and V are
then drawn at random (orthonormal, seeded) and the search starts from theta = 0 (a cold start, covey's choice).
The initial step size `sigma0` and the population (0: CMA-ES's 4 + 3 ln n) are covey's defaults (UNVERIFIED);
the paper's INT4/INT8 inference is not reproduced (the torch engine's `quantize: int8` can be combined).
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import Field
from torch import Tensor

from covey.learner.objective import Objective, ObjectiveCaps, register_objective
from covey.models.state import engine_state
from covey.objectives.cmaes import CMAES
from covey.rollouts import Rollouts

__all__ = ["ESSA", "SVDLoRA"]


class SVDLoRA:
    """The LoRA modules of a peft model as singular values over fixed bases (module docstring)."""

    def __init__(self, model: torch.nn.Module, seed: int = 0):
        from peft.tuners.lora import LoraLayer

        self.modules: list[tuple[torch.nn.Module, str, Tensor, Tensor]] = []  # (module, adapter, U [out, r], Vh [r, in])
        start: list[Tensor] = []
        gen = torch.Generator().manual_seed(seed)
        for _, module in model.named_modules():
            if not isinstance(module, LoraLayer):
                continue
            for name in module.active_adapters:
                if name not in module.lora_A:
                    continue
                a, b = module.lora_A[name].weight.detach().double(), module.lora_B[name].weight.detach().double()
                r = a.shape[0]
                delta = b @ a
                if float(delta.abs().max()) == 0.0:  # a cold adapter: random orthonormal bases, theta 0
                    u = torch.linalg.qr(torch.randn(b.shape[0], r, generator=gen, dtype=torch.float64))[0]
                    vh = torch.linalg.qr(torch.randn(a.shape[1], r, generator=gen, dtype=torch.float64))[0].T
                    s = torch.zeros(r, dtype=torch.float64)
                else:
                    u_full, s_full, vh_full = torch.linalg.svd(delta, full_matrices=False)
                    u, s, vh = u_full[:, :r], s_full[:r], vh_full[:r]
                self.modules.append((module, name, u, vh))
                start.append(s)
        if not self.modules:
            raise ValueError("essa_provisional: the policy has no LoRA adapter to search (set model.lora)")
        self.theta0 = torch.cat(start)

    def set(self, theta: Tensor) -> None:
        """Write singular values `theta` [r x modules] into the adapters (B = U diag(s), A = V^T)."""
        offset = 0
        with torch.no_grad():
            for module, name, u, vh in self.modules:
                r = vh.shape[0]
                s = theta[offset : offset + r].to(torch.float64)
                offset += r
                a, b = module.lora_A[name].weight, module.lora_B[name].weight
                b.copy_((u * s).to(b.dtype))
                a.copy_(vh.to(a.dtype))

    def state_dict(self) -> dict[str, Any]:
        return {"bases": [(u.clone(), vh.clone()) for _, _, u, vh in self.modules]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        bases = state["bases"]
        if len(bases) != len(self.modules):
            raise ValueError(f"essa_provisional: the checkpoint holds {len(bases)} adapters, the policy {len(self.modules)}")
        self.modules = [(m, n, u, vh) for (m, n, _, _), (u, vh) in zip(self.modules, bases)]


def _check(cfg) -> None:
    if cfg.model.lora is None:
        raise ValueError("algo.objective 'essa_provisional' searches the singular values of LoRA adapters: set model.lora "
                         "(ESSA starts from a LoRA warm start)")  # fmt: skip
    if cfg.rollout.strategy.name != "es_population":
        raise ValueError("algo.objective 'essa_provisional' needs its population rolled out: set rollout.strategy: es_population")
    if cfg.runtime.executor != "inline" or cfg.engine.name != "torch":
        raise ValueError("algo.objective 'essa_provisional' loads every candidate's weights into the engine during the rollout: "
                         f"it needs runtime.executor inline and the torch engine (got {cfg.runtime.executor!r}, {cfg.engine.name!r})")  # fmt: skip


@register_objective("essa_provisional", paper="ESSA: Evolutionary Strategies for Scalable Alignment", arxiv="2507.04453",
                    caps=ObjectiveCaps(check_run=_check))  # fmt: skip
class ESSA(Objective):
    """CMA-ES over LoRA singular values; fitness from the population's rewards (module docstring).

    sigma0:      CMA-ES's initial step size (in singular-value units).
    population:  candidates per step (0: CMA-ES's default 4 + floor(3 ln n)).
    """

    uses_advantages = False

    def __init__(self, cfg, policy, device, *, sigma0: Annotated[float, Field(gt=0)] = 0.02,
                 population: Annotated[int, Field(ge=0)] = 0):  # fmt: skip
        if population == 1:
            raise ValueError("essa_provisional: population must be 0 (the default) or >= 2")
        self.policy, self.seed = policy, int(cfg.seed)
        self.svd = SVDLoRA(policy, seed=cfg.seed)
        self.es = CMAES(self.svd.theta0, sigma0, population)
        self.svd.set(self.es.mean)
        self._candidates: Tensor | None = None
        self._generation = -1

    # -------------------------------------------------------------- asked by the es_population strategy
    def candidates(self) -> Tensor:
        """[lambda, n] this generation's candidates (drawn once per generation, from (seed, generation))."""
        if self._generation != self.es.generation or self._candidates is None:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.es.generation)
            self._candidates, self._generation = self.es.ask(gen), self.es.generation
        return self._candidates

    def candidate_weights(self, k: int):
        """What `engine.load_weights` loads for candidate k: the merged weights with its singular values."""
        self.svd.set(self.candidates()[k])
        return engine_state(self.policy)

    # -------------------------------------------------------------- the update: no gradient
    def prepare(self, learner, batch: Rollouts, generator) -> tuple[Rollouts | None, dict[str, Tensor], dict[str, float]]:
        if batch.candidate is None:
            raise ValueError("essa_provisional: the batch has no candidate of each row (rollout.strategy es_population)")
        cands = self.candidates()
        r = batch.scalar_rewards().double()
        fitness = torch.stack([r[batch.candidate == k].mean() for k in range(len(cands))])
        if not bool(torch.isfinite(fitness).all()):
            raise ValueError("essa_provisional: a candidate has no rows in the batch")
        self.es.tell(cands, fitness)
        self.svd.set(self.es.mean)
        return None, {}, {"essa/fitness_mean": float(fitness.mean()), "essa/fitness_best": float(fitness.max()),
                          "essa/sigma": self.es.sigma, "essa/theta_norm": float(self.es.mean.norm()),
                          "essa/generation": float(self.es.generation)}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"cma": self.es.state_dict(), "svd": self.svd.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and "cma" in state:
            self.svd.load_state_dict(state["svd"])
            self.es.load_state_dict(state["cma"])
            self.svd.set(self.es.mean)
