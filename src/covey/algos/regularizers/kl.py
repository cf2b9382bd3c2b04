"""Trust-region terms to pi_old: DisCO's squared-hinge KL constraint and TRPA's KL penalty."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from covey.algos.regularizers.base import Regularizer, RegularizerCaps, as_float, masked_token_mean, register_regularizer
from covey.algos.registry import KL_ESTIMATORS, BatchTotals, LossInputs
from covey.registry import RegistryError

NonNeg = Annotated[float, Field(ge=0.0)]


@register_regularizer(
    "disco_kl",
    paper="DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization (VERIFIED-CODE)",
    arxiv="2505.12366",
    caps=RegularizerCaps(old_policy_trust_region=True),
)  # fmt: skip
class DiscoKL(Regularizer):
    """DisCO's KL constraint to pi_old as a squared-hinge penalty. Returns a scalar.

    Released (Optimization-AI/DisCO `bd2b07812934` `compute_policy_loss_disco*`):

        kl_tok = old_logp - logp                     (kl_type="kl", the scripts' ppo_kl_type)
               = -(logp - old_logp) + ratio - 1      (kl_type="low_var_kl")
        KL     = token mean of kl_tok over the whole mini-batch
        reg    = sg(max(beta (KL - delta), 0)) * KL

    The coefficient needs the whole mini-batch's KL before the first backward: `prepass=True` runs a
    no-grad forward over the mini-batch (exact; free with one micro-batch); `prepass=False` uses the
    previous mini-batch's KL (0 at the first one; an approximation, saved in checkpoints).
    Defaults from the scripts: beta 1e3, delta 1e-4. On the first on-policy mini-batch KL = 0 and the
    term is inactive. Metrics: kl, coef, penalty (= coef KL, the term's value).
    """

    def __init__(self, *, beta: NonNeg = 1e3, delta: NonNeg = 1e-4, kl_type: Literal["kl", "low_var_kl"] = "kl",
                 prepass: bool = True):  # fmt: skip
        self.beta, self.delta, self.kl_type, self.prepass = beta, delta, kl_type, prepass
        self._sum = 0.0  # pre-pass: sum of kl_tok over the mini-batch
        self._acc = 0.0  # this mini-batch's KL, accumulated over micro-batches
        self._last = 0.0  # the previous mini-batch's KL (prepass=False)

    def kl_tok(self, inp: LossInputs):
        d = inp.logp - inp.old_logp
        return -d if self.kl_type == "kl" else -d + torch.exp(d.clamp(-20.0, 20.0)) - 1.0

    def begin(self) -> None:
        self._sum = self._acc = 0.0

    def observe(self, inp: LossInputs, totals: BatchTotals) -> None:
        self._sum += float((self.kl_tok(inp).detach() * inp.mask).sum())

    def __call__(self, inp: LossInputs, totals: BatchTotals):
        kl = masked_token_mean(self.kl_tok(inp), inp.mask, totals)  # this micro-batch's share of KL
        self._acc += float(kl.detach())
        whole = self._sum / max(totals.num_tokens, 1.0) if self.prepass else self._last
        coef = max(self.beta * (whole - self.delta), 0.0)
        return coef * kl, {"kl": whole, "coef": coef, "penalty": coef * whole}

    def after_step(self) -> dict[str, float]:
        self._last = self._acc
        return {}

    def state_dict(self):
        return {"last_kl": self._last}

    def load_state_dict(self, state):
        self._last = float(state.get("last_kl", 0.0))


@register_regularizer(
    "kl_old",
    paper="Trust Region Preference Approximation: A simple and stable reinforcement learning algorithm for LLM "
          "reasoning (VERIFIED-CODE)",
    arxiv="2504.04524",
    caps=RegularizerCaps(old_policy_trust_region=True),
)  # fmt: skip
class KLOld(Regularizer):
    """TRPA's trust region: coef * token mean of a KL estimator between pi_theta and pi_old. Returns a scalar.

    Released (XueruiSu/Trust-Region-Preference-Approximation `f372585ed6ec` `dp_actor.py`): total = loss + tr_kl_coef * masked_mean(low_var_kl(logp, old_logp)),
    tr_kl_coef 0.001 (`main_TRPA.sh`). covey: the estimator is any registered KL estimator
    (`covey.algos.kl`, pi_old in place of the reference); the mean is over the whole mini-batch's
    tokens (the reference: per micro-batch). Metrics: kl (token mean), loss.
    """

    def __init__(self, *, coef: NonNeg = 0.001, estimator: str = "low_var_kl"):
        if estimator not in KL_ESTIMATORS:
            raise RegistryError(f"regularizer 'kl_old' parameter 'estimator': unknown KL estimator {estimator!r}; "
                                f"known: {', '.join(sorted(KL_ESTIMATORS))}")  # fmt: skip
        self.coef = coef
        self.kl = KL_ESTIMATORS.get(estimator).bind({})

    def __call__(self, inp: LossInputs, totals: BatchTotals):
        kl_tok, _ = self.kl(inp.logp, inp.old_logp, inp.mask)
        kl = masked_token_mean(kl_tok, inp.mask, totals)
        return self.coef * kl, {"kl": as_float(kl) * totals.num_tokens / max(float(inp.mask.sum()), 1.0),
                                "loss": as_float(self.coef * kl)}  # fmt: skip
