"""Regression surrogates: the policy's log-ratio is regressed onto a target built from the advantage.

    reg_grpo_provisional   group-z-scored sequence log-ratio regressed onto the advantage (Reg-GRPO)
    rover                  Q = rho * log-ratio regressed onto A + the next state's uniform-policy value (ROVER)

Both register in the SURROGATES registry (`fn(inp: LossInputs, *, **params) -> (loss_tok [N, T], metrics)`)
and have no clip: the squared error is the loss.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor

from covey.algos.aggregation import masked_summary
from covey.algos.registry import LossInputs, register_surrogate
from covey.algos.surrogates import _check, _fracs, _seq_advantage, _seq_log_ratio

__all__ = ["reg_grpo_provisional", "rover"]

NonNeg = Annotated[float, Field(ge=0.0)]
Positive = Annotated[float, Field(gt=0.0)]


def _group_zscore(x: Tensor, group: Tensor, keep: Tensor, eps: float) -> Tensor:
    """(x - mean_g x) / (std_g x + eps) per row [N], unbiased std over the kept rows of each group;
    rows of a group with fewer than two kept rows (and rows not kept) get 0. Differentiable in x."""
    _, inv = torch.unique(group, return_inverse=True)
    k = int(inv.max()) + 1
    w = keep.to(x.dtype)
    size = torch.zeros(k, dtype=x.dtype, device=x.device).index_add(0, inv, w)
    mean = torch.zeros(k, dtype=x.dtype, device=x.device).index_add(0, inv, x * w) / size.clamp(min=1.0)
    dev = (x - mean[inv]) * w
    var = torch.zeros(k, dtype=x.dtype, device=x.device).index_add(0, inv, dev**2) / (size - 1.0).clamp(min=1.0)
    std = torch.sqrt(var + 1e-20)  # finite gradient at zero spread
    ok = (size[inv] > 1) & keep
    return torch.where(ok, dev / (std[inv] + eps), torch.zeros_like(x))


@register_surrogate(
    "reg_grpo_provisional",
    paper="DeepVideo-R1, Regressive GRPO (UNVERIFIED reconstruction)",
    arxiv="2506.07464",
    requires=("group",),
)  # fmt: skip
def reg_grpo_provisional(inp: LossInputs, *, eps: Positive = 1e-6) -> tuple[Tensor, dict[str, float]]:
    """Reg-GRPO (UNVERIFIED reconstruction): regress the group-normalised sequence log-ratio onto the advantage.

    Paper: DeepVideo-R1, arXiv 2506.07464. UNVERIFIED: no equations and
    no code read (the announced mlvlab/DeepVideoR1 was not available); covey's form:

        l_i     = masked mean_t (logp_it - old_logp_it)                    sequence log-ratio [N]
        Ahat_i  = (l_i - mean_g l) / (std_g l + eps)                       unbiased std over the group
        loss_i  = (Ahat_i - A_i)^2,  A_i = masked row mean of the advantages; repeated on the row's tokens

    Pair with aggregation `seq-mean-token-mean` (mean_i loss_i). Needs whole groups in a micro-batch
    (requires "group": the learner keeps them together and refuses a micro_batch_size below the group).
    Spec vector: l = [0.02, -0.01, 0, 0.03], A = [0.866, -0.866, -0.866, 0.866] -> Ahat =
    [0.5477, -1.0954, -0.5477, 1.0954], loss 0.0770. Edge cases: the gradient passes through the std;
    groups of one row and empty rows get Ahat = 0. Metrics: surrogate/ahat_abs_mean, surrogate/ratio
    (the sequence ratio exp(l)).

    The first on-policy update (checked for round two; no released code to compare: mlvlab publishes no
    DeepVideo-R1 repository in the code store, mlvlab/VideoSearch-R1 has no Reg-GRPO): pi_theta = pi_old,
    so l is 0 up to numerical noise and its group std s ~ 0. Where l_i - mean l = 0 the std's own
    gradient term vanishes and d loss / d l_j = -(2 / N) (A_j - mean_g A) / (s + eps) exactly: about
    2 |A| / (N eps), i.e. 1e4-1e6 before the token means and the network. That is the logged
    `learn/grad_norm` (the norm BEFORE clipping); the step applied is clipped to `optim.grad_clip`
    (1.0 by default), so the first update is a REINFORCE step (the direction of -A, tested) of norm
    grad_clip. This follows from the z-score of a zero-spread quantity, not from a wrong normaliser:
    kept, and documented; without grad clipping the first step would be ~1/eps too large.
    """
    _check(inp)
    if inp.group is None:
        raise ValueError("surrogate 'reg_grpo_provisional' needs LossInputs.group (the learner fills it when 'group' is required)")
    keep = inp.mask.sum(-1) > 0
    seq = _seq_log_ratio(inp, None)  # l_i
    ahat = _group_zscore(seq, inp.group.to(seq.device), keep, eps)
    loss = (ahat - _seq_advantage(inp)) ** 2
    metrics = masked_summary(ahat.detach().abs()[:, None].expand_as(inp.mask), inp.mask, "surrogate/ahat_abs", stats=("mean",))
    metrics.update(masked_summary(torch.exp(seq.detach()), keep.float(), "surrogate/ratio"))
    return loss[:, None].expand_as(inp.mask), metrics


@register_surrogate(
    "rover",
    paper="ROVER: Random Policy Valuation for Diverse Reasoning (VERIFIED-CODE)",
    arxiv="2509.24981",
    requires=("stat:vocab_mean_logp",),
)  # fmt: skip
def rover(
    inp: LossInputs,
    *,
    rho: Positive = 1.0,
    next_scale: NonNeg = 1.0,
    clip: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None,
    target_adv_only: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    """ROVER: regress Q = rho (logp - old_logp) onto the advantage plus the next state's uniform-policy value.

    Paper: arXiv 2509.24981; yuxiaooye/ROVER `ea5ce635ee03` `Math/verl/workers/actor/dp_actor.py`
    (`DataParallelROVERActor.update_policy`), `core_algos.py::compute_rover_loss`,
    `torch_functional.py::sum_log_softmax`.

        u_t(pi)   = mean_v log pi(v | s_t)                    LossInputs.stats / old_stats["vocab_mean_logp"]
        Q_it      = rho (logp_it - old_logp_it)
        next_it   = rho (u_{t+1}(pi_theta) - u_{t+1}(pi_old)) mask_{i,t+1};  0 at the last position
        target_it = A_it + next_scale next_it              (A_it alone with target_adv_only)
        loss_it   = (Q_it - sg(target_it))^2                                                  [N, T]
        clip=eps (use_rover_clip): Q := log(1 + eps) where target > Q > log(1 + eps),
                                   Q := log(1 - eps) where target < Q < log(1 - eps)  (no gradient there)

    Defaults rho (`rover_t`) 1, next_scale 1, no clip (math script). Pair with aggregation
    `token-mean` (verl masked_mean) and the `rover` advantage or `grpo` (the math script's). pi_old's
    statistics come from the old-log-prob recompute; with one update on the sampling policy they are
    the current ones, so next = 0 (ROVER's on-policy path). Spec vector: loss 0.8600, gradient wrt
    logp [-0.3333, -0.5333, -0.8667]. Metrics: surrogate/next_mean, surrogate/q_mean,
    surrogate/clip_frac, ratio.
    """
    _check(inp)
    if "vocab_mean_logp" not in inp.stats:
        raise ValueError("surrogate 'rover' needs LossInputs.stats['vocab_mean_logp'] (the learner computes it when "
                         "'stat:vocab_mean_logp' is required)")  # fmt: skip
    m = inp.mask
    q = rho * (inp.logp - inp.old_logp)
    u_cur = inp.stats["vocab_mean_logp"].detach()
    u_old = inp.old_stats.get("vocab_mean_logp", u_cur)
    nxt = torch.zeros_like(q)
    nxt[:, :-1] = rho * (u_cur[:, 1:] - u_old[:, 1:]) * m[:, 1:]
    target = (inp.advantages if target_adv_only else inp.advantages + next_scale * nxt).detach()
    clipped = torch.zeros_like(m, dtype=torch.bool)
    if clip is not None:
        hi, lo = torch.log1p(torch.tensor(clip)).item(), torch.log1p(torch.tensor(-clip)).item()
        qd = q.detach()
        up, down = (target > qd) & (qd > hi), (target < qd) & (qd < lo)
        q = torch.where(up, torch.full_like(q, hi), torch.where(down, torch.full_like(q, lo), q))
        clipped = up | down
    metrics = masked_summary(nxt, m, "surrogate/next", stats=("mean",))
    metrics.update(masked_summary(q.detach(), m, "surrogate/q", stats=("mean",)))
    metrics.update(masked_summary(torch.exp((inp.logp - inp.old_logp).detach().clamp(-20, 20)), m, "surrogate/ratio"))
    metrics.update(_fracs(m, clip_frac=clipped))
    return (q - target) ** 2, metrics
