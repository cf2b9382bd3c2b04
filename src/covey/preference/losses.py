"""Preference losses (registry `PREFERENCE_LOSSES`, config `preference.loss: {name, ...}`).

Each loss is ``fn(inp: PrefInputs, **params) -> (loss [U], metrics)``: one value per unit (a pair, or
a group for the set losses), averaged by the preference learner over every unit of the step. All of
them start from the per-token log-ratio of policy and reference, ``d = (logp - ref_logp) * mask``;
the sequence sum of a row is ``S(y) = sum_t d_t`` (TRL's `concatenated_forward` with
`loss_type="sigmoid"` sums, it does not average).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from covey.registry import Registry, RegistryError

__all__ = ["PREFERENCE_LOSSES", "PrefInputs", "rso_accept"]


@dataclass
class PrefInputs:
    """One step's rows and the units built from them (covey.preference.pairs).

    logp, ref_logp, mask:  [N, T] policy (with grad) and reference log-probs of each row's tokens, and
                           the completion mask.
    chosen, rejected:      [P] long row indices of each pair.
    group:                 [N] long group ids (the set losses group rows by it).
    preferred:             [N] bool, the rows a set loss treats as preferred (equivalent) ones.
    guide_logp:            [N, T] log-probs under a guidance model (TGDPO), else None.
    explore:               [N] bool, rows sampled from the reference (XPO's exploration term), else None.
    """

    logp: Tensor
    ref_logp: Tensor
    mask: Tensor
    chosen: Tensor
    rejected: Tensor
    group: Tensor
    preferred: Tensor
    guide_logp: Tensor | None = None
    explore: Tensor | None = None

    def ratio_sums(self) -> Tensor:
        """[N] S(y) = sum_t (logp - ref_logp) over the row's tokens."""
        return ((self.logp - self.ref_logp) * self.mask).sum(-1)


def _check(out, args) -> str | None:
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor) and out[0].dim() == 1):
        return "must return (loss [U] tensor, metrics dict)"
    return None


PREFERENCE_LOSSES = Registry("preference loss", context=("inputs",), signature="fn(inputs: PrefInputs, **params) -> (loss [U], metrics)",
                             returns=_check, returns_doc="(loss [U], metrics)", defaults_required=True)  # fmt: skip


def _pair_loss(logits: Tensor, beta: float, loss_type: str) -> Tensor:
    """TRL's DPO family on the pair logits h = S(y_w) - S(y_l)."""
    if loss_type == "sigmoid":  # DPO
        return -F.logsigmoid(beta * logits)
    if loss_type == "hinge":  # SLiC / RSO: beta is the reciprocal of the margin
        return torch.relu(1 - beta * logits)
    if loss_type == "ipo":  # IPO: (h - 1/(2 beta))^2
        return (logits - 1 / (2 * beta)) ** 2
    raise RegistryError(f"preference loss: loss_type must be sigmoid, hinge or ipo, got {loss_type!r}")


def _pair_metrics(logits: Tensor, beta: float, s: Tensor, inp: PrefInputs) -> dict[str, float]:
    if logits.numel() == 0:
        return {}
    return {
        "accuracy": float((logits > 0).float().mean()),  # TRL's rewards/accuracies
        "margin": float(beta * logits.detach().mean()),  # rewards/margins
        "chosen_reward": float(beta * s[inp.chosen].detach().mean()),
        "rejected_reward": float(beta * s[inp.rejected].detach().mean()),
    }


@PREFERENCE_LOSSES.register("dpo", paper="Direct Preference Optimization: Your Language Model is Secretly a Reward Model", arxiv="2305.18290")
def dpo(inp: PrefInputs, *, beta: float = 0.1, loss_type: str = "sigmoid") -> tuple[Tensor, dict[str, float]]:
    """DPO on the pair's sequence log-ratios; loss_type sigmoid (DPO), hinge (RSO, SLiC) or ipo.

    sigmoid -log sigmoid(beta h), h = S(y_w) - S(y_l); hinge max(0, 1 - beta h) and ipo (h - 1/(2 beta))^2. Checked against TRL (huggingface/trl `01b75634a088`,
    `DPOTrainer.dpo_loss`: sigmoid without label smoothing, hinge, ipo)."""
    s = inp.ratio_sums()
    logits = s[inp.chosen] - s[inp.rejected]
    return _pair_loss(logits, beta, loss_type), _pair_metrics(logits, beta, s, inp)


@PREFERENCE_LOSSES.register("xpo", paper="Exploratory Preference Optimization", arxiv="2405.21046")
def xpo(inp: PrefInputs, *, beta: float = 0.1, alpha: float = 1e-5, loss_type: str = "sigmoid") -> tuple[Tensor, dict[str, float]]:
    """XPO: DPO on (policy, reference) pairs plus alpha times the reference sample's log-likelihood.

    The DPO loss of each pair plus alpha * sum_t log pi_theta(y~_t) of the pair's reference
    sample y~ (the row of the pair flagged `explore`), which pushes probability away from what the
    reference itself would say. Checked against TRL `XPOTrainer._compute_losses` (huggingface/trl
    `01b75634a088`; alpha 1e-5, beta 0.1 there): the pair is one policy and one reference sample."""
    if inp.explore is None:
        raise RegistryError("preference loss 'xpo' needs reference samples: use preference.pairs 'xpo' (rollout.strategy reference_pairs)")
    s = inp.ratio_sums()
    logits = s[inp.chosen] - s[inp.rejected]
    seq = (inp.logp * inp.mask).sum(-1)  # S_m: sequence log-likelihood under the policy
    is_ref_w, is_ref_l = inp.explore[inp.chosen], inp.explore[inp.rejected]
    if bool((is_ref_w == is_ref_l).any()):
        raise RegistryError("preference loss 'xpo': every pair must hold one policy and one reference sample")
    y_ref = torch.where(is_ref_w, inp.chosen, inp.rejected)
    bonus = alpha * seq[y_ref]
    m = _pair_metrics(logits, beta, s, inp)
    if bonus.numel():
        m["xpo_loss"] = float(bonus.detach().mean())
    return _pair_loss(logits, beta, loss_type) + bonus, m


@PREFERENCE_LOSSES.register("tgdpo", paper="TGDPO: Harnessing Token-Level Reward Guidance for Enhancing Direct Preference Optimization", arxiv="2506.14574")
def tgdpo(inp: PrefInputs, *, beta: float = 0.1, alpha: float = 0.5) -> tuple[Tensor, dict[str, float]]:
    """TGDPO: DPO with per-token weights from a guidance model's implicit token reward.

    delta_t = log pi_rm(y_t) - log pi_ref(y_t):
    logit = sum_t beta (1 + alpha beta delta^w_t) d^w_t - sum_t beta (1 - alpha beta delta^l_t) d^l_t,
    loss = -log sigmoid(logit). Checked against dvlab-research/TGDPO `dd889823897c`
    (`CustomDPOTrainer.dpo_loss`, loss_type sigmoid; alpha `tgdpo_alpha` 0.5, beta 0.1). alpha = 0 is DPO."""
    if inp.guide_logp is None:
        raise RegistryError("preference loss 'tgdpo' needs a guidance model: preference.guide_model")
    d = (inp.logp - inp.ref_logp) * inp.mask
    delta = (inp.guide_logp - inp.ref_logp) * inp.mask
    w_w = beta * (1 + alpha * beta * delta[inp.chosen])
    w_l = beta * (1 - alpha * beta * delta[inp.rejected])
    logits = (w_w * d[inp.chosen]).sum(-1) - (w_l * d[inp.rejected]).sum(-1)
    s = d.sum(-1)
    m = _pair_metrics(logits, 1.0, s * beta, inp) if logits.numel() else {}
    return -F.logsigmoid(logits), m


@PREFERENCE_LOSSES.register("gepo_provisional", paper="OORL / GEPO: Group Equivalent Preference Optimization (provisional)", arxiv="2505.12723")
def gepo_provisional(inp: PrefInputs, *, beta: float = 0.1, lam: float = 1.0) -> tuple[Tensor, dict[str, float]]:
    """GEPO (reconstructed): a group's preferred rows over the others, equally likely among themselves.

    No code or equations of the paper could be read. Per group with both preferred (equivalent, E) and other (I) rows,
    loss = -log sigmoid(beta (mean_E rho - mean_I rho)) + lam * Var_E(rho), rho = S(y) (sequence
    log-ratio), Var the population variance. One unit per such group."""
    s = inp.ratio_sums()
    losses, gaps = [], []
    for g in torch.unique(inp.group):
        rows = inp.group == g
        e, i = s[rows & inp.preferred], s[rows & ~inp.preferred]
        if len(e) == 0 or len(i) == 0:
            continue
        gap = e.mean() - i.mean()
        losses.append(-F.logsigmoid(beta * gap) + lam * ((e - e.mean()) ** 2).mean())
        gaps.append(float(gap.detach()))
    if not losses:
        return s.new_zeros(0), {}
    return torch.stack(losses), {"accuracy": sum(x > 0 for x in gaps) / len(gaps), "margin": beta * sum(gaps) / len(gaps)}


def rso_accept(rewards: list[float], beta_rs: float, n: int, uniform) -> list[int]:
    """RSO's statistical rejection sampler over one prompt's candidates: checked against the Python
    listing of the paper's Algorithm 1 (arXiv 2309.06657, appendix A.1). Until `n` are accepted: take
    r_max over the remaining candidates, then for each remaining candidate in order draw u = uniform()
    and accept it when u < exp((r_j - r_max) / beta_rs), stopping at `n`; the accepted leave the pool.
    The arg-max of each round is always accepted. `n` is capped at the number of candidates (the
    listing would loop for ever). Returns accepted indices in the order they were accepted, as the
    listing does."""
    if beta_rs <= 0:
        raise ValueError(f"rso: beta_rs must be > 0, got {beta_rs}")
    left = list(range(len(rewards)))
    accepted: list[int] = []
    n = min(n, len(rewards))
    while len(accepted) < n:
        r_max = max(rewards[j] for j in left)
        for j in list(left):
            if uniform() < math.exp((rewards[j] - r_max) / beta_rs):
                accepted.append(j)
                left.remove(j)
                if len(accepted) == n:
                    break
    return accepted
