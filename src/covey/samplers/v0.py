"""`v0_provisional`: a value model at state zero predicts each prompt's pass rate for the current policy
before any rollout, and the sampler draws the prompts it predicts most informative.

Paper: "V_0: A Generalist Value Model for Any Policy at State Zero" (arXiv 2602.03584). RECONSTRUCTED: no
code was found (searched); what is confirmed (abstract, summaries): the value of a prompt for a policy is
predicted in context, from a history of (instruction, performance) pairs that profiles the policy's current
capability, with no parameter update (a semantic encoder, a residual query adapter and TabPFN inference in
the paper); during GRPO it predicts success rates before rollout to allocate the sampling budget. Covey's
version trains on the run's own outcomes and needs no second model:

    features  phi(x): the prompt text's character trigrams hashed into `dim` buckets, L2-normalised
              (a fixed stand-in for the paper's semantic encoder: prompts that share wording share features)
    history   the last `window` observations (phi(x_j), s_j correct of n_j rollouts) of this run
    predict   w_j = exp(-(1 - phi(x) . phi(x_j)) / tau)                 (1 for the same prompt)
              p(x) = (a0 m + sum_j w_j s_j) / (a0 + sum_j w_j n_j),    m = the history's pass rate (1/2 when empty)
    draw      the next `pool` x k prompts of the uniform order are candidates; the k with the largest
              p (1 - p) (the GRPO signal a(1 - a): neither always solved nor never) are rolled out, the
              others are passed over for this epoch; ties keep the uniform order; an item twice in the
              pool (an epoch boundary) is one candidate

Metric `sampler/v0_provisional/pred_mae`: the mean |predicted - observed| pass rate of the step's prompts (how
well the value model tracks the policy), and `pred_mean`, `picked_value_mean`, `history`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Annotated, Any

import torch
from pydantic import Field
from torch import Tensor

from covey.rollouts import Rollouts
from covey.samplers.base import Draw, Feedback, register_sampler
from covey.samplers.feedback import ItemIndex, prompt_outcomes
from covey.samplers.sampler import UniformSampler

__all__ = ["V0Sampler", "prompt_features", "v0_predict"]


def _text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt)


def prompt_features(prompts: Sequence, dim: int = 256) -> Tensor:
    """[P, dim] float64: hashed character-trigram counts of each prompt's text, L2-normalised (zero rows
    for texts shorter than 3 characters)."""
    out = torch.zeros(len(prompts), dim, dtype=torch.float64)
    for i, p in enumerate(prompts):
        t = _text(p).lower()
        for a in range(len(t) - 2):
            out[i, int.from_bytes(hashlib.md5(t[a : a + 3].encode()).digest()[:4], "little") % dim] += 1.0
    norm = out.norm(dim=-1, keepdim=True)
    return torch.where(norm > 0, out / norm.clamp(min=1e-12), out)


def v0_predict(query: Tensor, hist: Tensor, succ: Tensor, count: Tensor, *, a0: float, tau: float) -> Tensor:
    """[Q] predicted pass rates of `query` features [Q, D] from the history `hist` [H, D] with successes and
    rollouts [H] (module docstring); an empty history predicts 1/2."""
    if hist.shape[0] == 0:
        return torch.full((query.shape[0],), 0.5, dtype=torch.float64)
    m = float(succ.sum() / count.sum()) if float(count.sum()) > 0 else 0.5
    w = torch.exp(-(1.0 - query @ hist.T) / tau)  # [Q, H]
    return (a0 * m + w @ succ) / (a0 + w @ count)


@register_sampler("v0_provisional")
class V0Sampler(UniformSampler):
    """V_0's state-zero value model choosing the prompts to roll out (module docstring).

    pool:    candidates per drawn prompt (>= 1; 1 draws the uniform order unchanged).
    window:  observations kept in the history (the policy's recent capability profile).
    a0:      prior pseudo-count of the prediction (> 0).
    tau:     the similarity kernel's width (> 0; small: only near-identical prompts inform a prediction).
    dim:     feature buckets.
    """

    def __init__(self, items: Sequence[dict], seed: int = 0, *, pool: Annotated[int, Field(ge=1)] = 4,
                 window: Annotated[int, Field(ge=1)] = 512, a0: Annotated[float, Field(gt=0)] = 1.0,
                 tau: Annotated[float, Field(gt=0)] = 0.1, dim: Annotated[int, Field(ge=8)] = 256):  # fmt: skip
        super().__init__(items, seed)
        if pool < 1 or window < 1 or a0 <= 0 or tau <= 0 or dim < 8:
            raise ValueError(f"sampler v0_provisional: need pool >= 1, window >= 1, a0 > 0, tau > 0, dim >= 8 (got {pool}, "
                             f"{window}, {a0}, {tau}, {dim})")  # fmt: skip
        self.pool, self.window, self.a0, self.tau = pool, window, float(a0), float(tau)
        self.index = ItemIndex(items)
        self.features = prompt_features([it["prompt"] for it in items], dim)
        self.hist_pos = torch.zeros(0, dtype=torch.long)
        self.hist_succ = torch.zeros(0, dtype=torch.float64)
        self.hist_count = torch.zeros(0, dtype=torch.float64)
        self.predicted: dict[int, float] = {}  # item position -> pass rate predicted when it was drawn
        self._picked = torch.zeros(0, dtype=torch.float64)  # the value p (1 - p) of the last draw's picks

    def predict(self, positions: Tensor) -> Tensor:
        return v0_predict(self.features[positions], self.features[self.hist_pos], self.hist_succ, self.hist_count,
                          a0=self.a0, tau=self.tau)  # fmt: skip

    def next(self, k: int, group_size: int) -> list[Draw]:
        drawn = [self.index.pos[int(it["id"])] for it in self.pick(self.pool * k)]
        cand = torch.tensor(list(dict.fromkeys(drawn)))  # an item twice in the pool (an epoch boundary) counts once
        p = self.predict(cand)
        value = p * (1 - p)
        ranked = torch.argsort(-value, stable=True)
        order = ranked.repeat(-(-k // len(ranked)))[:k]  # fewer distinct candidates than k: repeat the ranking
        for i in order.tolist():
            self.predicted[int(cand[i])] = float(p[i])
        self._picked = value[order]
        return [Draw(self.items[int(cand[i])], group_size) for i in order.tolist()]

    def observe(self, batch: Rollouts) -> Feedback:
        ids, succ, count = prompt_outcomes(batch)
        pos = self.index.positions(ids)
        observed = succ / count
        pred = torch.tensor([self.predicted.pop(int(i), 0.5) for i in pos.tolist()], dtype=torch.float64)
        self.hist_pos = torch.cat([self.hist_pos, pos])[-self.window :]
        self.hist_succ = torch.cat([self.hist_succ, succ])[-self.window :]
        self.hist_count = torch.cat([self.hist_count, count])[-self.window :]
        picked = self._picked
        return Feedback({
            "sampler/v0_provisional/pred_mae": float((pred - observed).abs().mean()) if len(pos) else 0.0,
            "sampler/v0_provisional/pred_mean": float(pred.mean()) if len(pos) else 0.0,
            "sampler/v0_provisional/picked_value_mean": float(picked.mean()) if len(picked) else 0.0,
            "sampler/v0_provisional/history": float(len(self.hist_pos)),
        })  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "hist_pos": self.hist_pos.clone(), "hist_succ": self.hist_succ.clone(),
                "hist_count": self.hist_count.clone(), "predicted": dict(self.predicted)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.hist_pos, self.hist_succ = state["hist_pos"].clone(), state["hist_succ"].clone()
        self.hist_count, self.predicted = state["hist_count"].clone(), {int(k): float(v) for k, v in state["predicted"].items()}
