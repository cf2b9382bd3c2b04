"""`spo`: per-prompt value tracker, prioritised sampling, one completion per prompt.

Paper: "Single-stream Policy Optimization", arXiv 2509.13232. Behaviour follows the authors' code
(verl-recipe `spo/spo_ray_trainer.py`, status CODE; notes: docs/sampling.md):

    per prompt: alpha, beta   (p_hat = alpha / (alpha + beta))
    init (offline scores s_1..s_Neff in {0,1} from the base model, optional):
        N_init = 1 / (1 - clip_lower);  alpha = N_init (sum s + 0.5) / (Neff + 1)
        beta = N_init (Neff - sum s + 0.5) / (Neff + 1);  no scores: alpha = beta = 0.5
    draw:     w = sqrt(p_hat (1 - p_hat)) + eps; k prompts with prob ∝ w (from `candidates` prompts
              drawn uniformly, or the whole pool), with replacement only when k > #candidates
    observe:  baseline of each row = p_hat BEFORE the update -> batch.baseline [N]
              alpha = rho alpha + k_i;  beta = rho beta + (n_i - k_i)   (rho_type "constant"; "kl": below)

The `spo` advantage estimator (covey.algos.advantages.spo) reads the baseline: A = r - p_hat, then
normalised over the whole batch.

Forgetting (`rho_type`):

    "kl" (the code's default rho.type): in `after_update`, i.e. after the actor update, for each prompt
          of the batch D = masked mean over tokens of |logp_stored - logp_current| of the prompt's
          response from its previous visit (logp_stored: its log-probs under the policy as updated
          at that visit; logp_current: under the policy just updated); first visit D = 0;
          rho = clip(2^(-D / 0.06), clip_lower, 0.96)  (`spo_rho`);
          alpha = rho alpha + k_i, beta = rho beta + (n_i - k_i); then this step's responses are
          stored with their log-probs under the updated policy. The stored responses and this
          step's go through the policy in one forward.
    "constant" (rho.type "constant"): rho = `rho` for every prompt, updated in `observe`.

With n > 1 completions (or a prompt drawn twice in a step) a visit adds all its outcomes at once,
stores all its responses, and D pools the tokens of all the responses stored at the previous visit
(for n = 1 this is the code's per-response masked mean). A response with no tokens gives D = 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from covey.samplers.base import BaseSampler, Draw, Feedback, PolicyLogprobs, register_sampler
from covey.samplers.feedback import ItemIndex, draw_generator, prompt_outcomes
from covey.rollouts import Rollouts

__all__ = ["SPOSampler", "offline_prior", "prompt_drift", "spo_rho", "spo_weights"]



def offline_prior(scores: Sequence[float], clip_lower: float = 0.875) -> tuple[float, float]:
    """(alpha, beta) from offline 0/1 scores of the base model (SPO code; no scores -> 0.5, 0.5)."""
    n = len(scores)
    if n == 0:
        return 0.5, 0.5
    n_init = 1.0 / (1.0 - clip_lower)
    s = float(sum(scores))
    return n_init * (s + 0.5) / (n + 1), n_init * (n - s + 0.5) / (n + 1)


def spo_rho(drift: float, clip_lower: float = 0.875, clip_upper: float = 0.96, d_half: float = 0.06) -> float:
    """KL-adaptive forgetting factor of the SPO code: clip(2^(-D / d_half), clip_lower, clip_upper)."""
    return min(max(2.0 ** (-drift / d_half), clip_lower), clip_upper)


def spo_weights(alpha: Tensor, beta: Tensor, eps: float) -> Tensor:
    """Sampling weights sqrt(p_hat (1 - p_hat)) + eps (never zero for eps > 0)."""
    p = alpha / (alpha + beta)
    return torch.sqrt(p * (1 - p)) + eps


def prompt_drift(stored: Tensor, current: Tensor, mask: Tensor) -> float:
    """SPO's D: masked mean of |stored - current| log-probs over all tokens of a prompt's stored
    responses ([k, T] each); 0 when they hold no token."""
    m = mask.double()
    tokens = float(m.sum())
    return float(((stored.double() - current.double()).abs() * m).sum()) / tokens if tokens else 0.0


@register_sampler("spo")
class SPOSampler(BaseSampler):
    """SPO's tracker and prioritised sampler (see the module docstring).

    n:           completions per prompt (SPO: 1, a single stream).
    rho_type:    "kl" (the code's default: rho from the policy's drift, needs the trainer's
                 `after_update` call) or "constant"; unset: "constant" when `rho` is given, else "kl".
    rho:         the constant forgetting factor in (0, 1] of rho_type "constant" (default 0.875);
                 refused with an explicit rho_type "kl", which computes rho.
    eps:         exploration floor of the sampling weight (0.05).
    candidates:  prompts drawn uniformly before prioritised sampling (SPO's gen_batch_size); None = all.
    offline_key: item column holding offline 0/1 scores for the prior (None: alpha = beta = 0.5).
    clip_lower:  lower clip of the KL rho, and the prior's strength N_init = 1 / (1 - clip_lower) (0.875 -> 8).
    """

    @staticmethod
    def provides(params: dict) -> set[str]:  # covey.compat: n = 1 is a single stream (groups of one row)
        return {"spo_baseline"} | ({"single_rows"} if params.get("n", 1) < 2 else set())

    def __init__(self, items: Sequence[dict], seed: int = 0, *, n: int = 1, rho_type: Literal["kl", "constant"] | None = None,
                 rho: float | None = None, eps: float = 0.05, candidates: int | None = None,
                 offline_key: str | None = None, clip_lower: float = 0.875):  # fmt: skip
        super().__init__(items, seed)
        if n < 1:
            raise ValueError(f"sampler spo: n must be >= 1, got {n}")
        if rho_type is None:  # `rho: 0.9` alone means a constant factor, as before rho_type existed
            rho_type = "kl" if rho is None else "constant"
        if rho_type not in ("kl", "constant"):
            raise ValueError(f"sampler spo: rho_type must be 'kl' or 'constant', got {rho_type!r}")
        if rho_type == "kl" and rho is not None:
            raise ValueError(f"sampler spo: rho={rho} is the factor of rho_type 'constant'; rho_type 'kl' computes "
                             "rho from the policy's drift (set rho_type: constant to use a fixed rho)")  # fmt: skip
        rho = 0.875 if rho is None else rho
        if not 0 < rho <= 1:
            raise ValueError(f"sampler spo: rho must be in (0, 1], got {rho}")
        if eps <= 0:
            raise ValueError(f"sampler spo: eps must be > 0 (weights must never be zero), got {eps}")
        if candidates is not None and candidates < 1:
            raise ValueError(f"sampler spo: candidates must be >= 1 or null, got {candidates}")
        if not 0 <= clip_lower < 1:
            raise ValueError(f"sampler spo: clip_lower must be in [0, 1), got {clip_lower}")
        self.n, self.rho_type, self.rho, self.eps, self.candidates = n, rho_type, float(rho), float(eps), candidates
        self.clip_lower = float(clip_lower)
        self.index = ItemIndex(items)
        prior = [offline_prior(self._scores(it, i, offline_key), clip_lower) if offline_key else (0.5, 0.5)
                 for i, it in enumerate(items)]  # fmt: skip
        self.alpha = torch.tensor([a for a, _ in prior], dtype=torch.float64)
        self.beta = torch.tensor([b for _, b in prior], dtype=torch.float64)
        self.calls = 0
        # position -> the responses of its last visit: {"prompt": [P], "ids": [k, T], "logp": [k, T], "mask": [k, T]}
        self.last: dict[int, dict[str, Tensor]] = {}

    @staticmethod
    def _scores(item: dict, i: int, key: str) -> list[float]:
        s = item.get(key)
        if not isinstance(s, (list, tuple)) or not all(isinstance(x, (int, float)) for x in s):
            raise ValueError(f"sampler spo: item {i} (id {item.get('id')}) column {key!r} must be a list of 0/1 scores, got {s!r}")
        return list(s)

    def next(self, k: int, group_size: int) -> list[Draw]:
        gen = draw_generator(self.seed, "spo", self.calls)
        self.calls += 1
        m = len(self.items)
        pool = torch.arange(m)
        if self.candidates is not None and self.candidates < m:
            pool = torch.randperm(m, generator=gen)[: self.candidates]
        w = spo_weights(self.alpha[pool], self.beta[pool], self.eps)
        pick = pool[torch.multinomial(w, k, replacement=k > len(pool), generator=gen)]
        return [Draw(self.items[i], self.n) for i in pick.tolist()]

    def observe(self, batch: Rollouts) -> Feedback:
        ids, succ, count = prompt_outcomes(batch)
        pos = self.index.positions(ids)
        p_hat = self.alpha / (self.alpha + self.beta)
        row_pos = self.index.positions(batch.prompt_id.cpu())
        batch.baseline = p_hat[row_pos].to(torch.float32).to(batch.prompt_id.device)
        if self.rho_type == "constant":
            self.alpha[pos] = self.rho * self.alpha[pos] + succ
            self.beta[pos] = self.rho * self.beta[pos] + (count - succ)
        return Feedback({"sampler/spo/p_hat_mean": float(p_hat[pos].mean()), "sampler/spo/unique_frac": len(ids) / max(len(batch), 1)})

    def after_update(self, batch: Rollouts, policy_logprobs: PolicyLogprobs) -> dict[str, float]:
        """KL-adaptive forgetting (rho_type "kl"): rho from each prompt's drift, then alpha/beta, then
        store this step's responses with their log-probs under the updated policy."""
        if self.rho_type != "kl":
            return {}
        ids, succ, count = prompt_outcomes(batch)
        pos = self.index.positions(ids).tolist()
        pid, mask = batch.prompt_id.cpu(), batch.completion_mask.cpu()
        prev = [self.last[p] for p in pos if p in self.last]
        prompts = [s["prompt"] for s in prev for _ in range(len(s["ids"]))] + [p.cpu() for p in batch.prompt_ids]
        width = max([1, mask.shape[1]] + [s["ids"].shape[1] for s in prev])
        ids_all = torch.cat([_pad(s["ids"], width) for s in prev] + [_pad(batch.completion_ids.cpu(), width)])
        mask_all = torch.cat([_pad(s["mask"], width) for s in prev] + [_pad(mask, width)])
        logp = policy_logprobs(prompts, ids_all, mask_all).detach().float().cpu() * mask_all
        drift, row = [], 0
        for p in pos:
            if p not in self.last:
                drift.append(0.0)  # first visit: both sides under the current policy
                continue
            s = self.last[p]
            k, t = s["ids"].shape
            drift.append(prompt_drift(s["logp"], logp[row : row + k, :t], s["mask"]))
            row += k
        rho = torch.tensor([spo_rho(d, self.clip_lower) for d in drift], dtype=torch.float64)
        self.alpha[pos] = rho * self.alpha[pos] + succ
        self.beta[pos] = rho * self.beta[pos] + (count - succ)
        current = logp[row:]
        for key, p in zip(ids.tolist(), pos):
            rows = (pid == key).nonzero().squeeze(1)
            t = max(1, int(mask[rows].sum(-1).max()))
            self.last[p] = {"prompt": batch.prompt_ids[int(rows[0])].cpu().clone(), "ids": batch.completion_ids.cpu()[rows, :t].clone(),
                            "logp": current[rows, :t].clone(), "mask": mask[rows, :t].clone()}  # fmt: skip
        return {"sampler/spo/drift_mean": sum(drift) / len(drift), "sampler/spo/rho_mean": float(rho.mean()),
                "sampler/spo/first_visit_frac": float(len(pos) - len(prev)) / len(pos)}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        last = {p: {k: v.clone() for k, v in s.items()} for p, s in self.last.items()}
        return {"alpha": self.alpha.clone(), "beta": self.beta.clone(), "calls": self.calls, "last": last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["alpha"].shape != self.alpha.shape:
            raise ValueError(f"sampler spo: checkpoint holds {state['alpha'].numel()} prompts, the task has {len(self.items)}")
        self.alpha, self.beta, self.calls = state["alpha"].clone(), state["beta"].clone(), int(state["calls"])
        self.last = {int(p): {k: v.clone() for k, v in s.items()} for p, s in state.get("last", {}).items()}


def _pad(x: Tensor, width: int) -> Tensor:
    """Right-pad [k, t] to [k, width] with zeros."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))
