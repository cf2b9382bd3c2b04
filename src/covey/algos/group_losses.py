"""Group-coupled surrogates that recompute their papers' losses from the current log-probs.

    disco   DisCO's discriminative objective (positives against a soft-max, or the mean, of the negatives)
    trpa    TRPA's Bradley-Terry loss over preference-level pairs

Both papers' released code computes the loss on every mini-batch (and micro-batch) from the current
policy's log-probs. covey's advantage estimators of the same names (`covey.algos.advantages.disco`,
`.pairwise.trpa`) are the gradient of that loss at theta = theta_old: exact for one update per batch
only. These surrogates are exact for any number of mini-batches and epochs. They ignore
`inp.advantages` (pair them with the estimator of the same name for its metrics, or any other).

Shapes: logp / old_logp / ref_logp / mask [N, T], group [N], row values [N]. Each returns a per-row loss
l_i repeated on the row's tokens, scaled so that the `seq-mean-token-mean` aggregation (which they
declare, `aggregation`; other aggregations are refused when the config is read) gives the released
value: (1/N_seq) sum_i (N_seq / D) l_i = (1/D) sum_i l_i, with N_seq the non-empty rows and D the
released denominator (DisCO: the number of groups; TRPA: the number of pairs), both counted over the
rows the surrogate is given: the whole mini-batch unless `optim.micro_batch_size` splits it, in which
case each micro-batch is normalised on its own as the released code does (weighted by its share of the
mini-batch's rows where the released code divides by the number of micro-batches).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from covey.algos.advantages.drpo import binary_masks
from covey.algos.advantages.pairwise import trpa_pairs
from covey.algos.aggregation import masked_row_mean, masked_summary
from covey.algos.registry import LossInputs, SurrogateCaps, register_surrogate
from covey.algos.surrogates import _check

__all__ = ["disco_loss", "trpa_loss"]

Positive = Annotated[float, Field(gt=0.0)]
F32_EPS = torch.finfo(torch.float32).eps  # the released `torch.finfo(neg_sum_exp.dtype).eps` (fp32 scores)


def _dense_groups(inp: LossInputs, who: str) -> tuple[Tensor, int]:
    if inp.group is None:
        raise ValueError(f"surrogate {who!r} needs LossInputs.group (the learner fills it when 'group' is required)")
    _, gidx = torch.unique(inp.group.to(inp.mask.device), return_inverse=True)
    return gidx, int(gidx.max()) + 1 if gidx.numel() else 0


def _row(inp: LossInputs, key: str, who: str) -> Tensor:
    if key not in inp.row:
        have = sorted(k[4:] for k in inp.row if k.startswith("col:"))
        raise ValueError(f"surrogate {who!r} needs the per-row value {key!r} (reward columns: {have})")
    return inp.row[key].to(inp.mask.device, torch.float64)


def _spread(loss_row: Tensor, scale: float, mask: Tensor) -> Tensor:
    """[N] per-row loss -> [N, T] on every token, times `scale` (N_seq / D)."""
    return (scale * loss_row)[:, None].expand_as(mask).to(mask.dtype)


@register_surrogate(
    "disco",
    paper="DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization (VERIFIED-CODE)",
    arxiv="2505.12366",
    requires=("group", "row"),
)  # fmt: skip
def disco_loss(
    inp: LossInputs,
    *,
    tau: Positive = 10.0,
    neg: Literal["softmax", "mean"] = "softmax",
    score: Literal["logL", "Lratio"] = "logL",
) -> tuple[Tensor, dict[str, float]]:
    """DisCO's objective on the current log-probs (exact under several mini-batches and epochs).

    Checked against Optimization-AI/DisCO @ bd2b078129347a87c10fbb64df12ed50dce59947,
    `verl/verl/trainer/ppo/core_algos.py::compute_policy_loss_disco{,b}_{logL,Lratio}`, called per
    micro-batch by `verl/verl/workers/actor/dp_actor.py::update_policy`:

        s_i   = mean_t logp_it ("logL")   or   mean_t exp(logp_it - old_logp_it) ("Lratio")
        pos / neg = rows with reward 1 / 0 (LossInputs.row["reward"]) in groups that hold both
        disco   (neg="softmax"): J_g = mean_pos s - tau * S_g / sg(S_g + eps),
                                  S_g = sum_neg exp(s_k / tau - sg(max_neg s / tau))
                                  (value tau, gradient that of tau log sum_neg exp(s / tau), as released)
        disco-b (neg="mean"):    J_g = mean_pos s - mean_neg s
        loss  = -(1/Q) sum_g J_g,   Q = groups given (invalid ones count)

    Per row: l_i = -s_i / |pos_g| (positives), tau exp(..)/sg(S_g + eps) or s_k / |neg_g| (negatives),
    0 elsewhere; sum over a group = -J_g. DisCO's KL constraint is the regularizer `disco_kl`.
    Defaults tau 10 (logL scripts; the Lratio scripts use 1). Departures: a row with no token is in
    neither set (the released mean divides by 0); the released `grpo_type=disco_Lratio` dispatches to
    the DisCO-b Lratio function with a `tau` it does not accept, covey follows
    `compute_policy_loss_disco_Lratio`. Metrics: surrogate/valid_groups, surrogate/score_mean.
    """
    _check(inp)
    gidx, num = _dense_groups(inp, "disco")
    m = inp.mask
    nonempty = m.sum(-1) > 0
    s = masked_row_mean(inp.logp if score == "logL" else torch.exp((inp.logp - inp.old_logp).clamp(-20, 20)), m).double()
    pos, negs, valid = binary_masks(gidx, num, _row(inp, "reward", "disco"), nonempty)
    count = lambda x: torch.zeros(num, dtype=s.dtype, device=s.device).index_add_(0, gidx, x.to(s.dtype))  # noqa: E731
    zero = torch.zeros_like(s)
    loss = torch.where(pos, -s / count(pos)[gidx].clamp(min=1.0), zero)
    if neg == "mean":
        loss = loss + torch.where(negs, s / count(negs)[gidx].clamp(min=1.0), zero)
    else:
        z = (s / tau).detach()
        zmax = torch.full((num,), -torch.inf, dtype=s.dtype, device=s.device)
        zmax = zmax.scatter_reduce(0, gidx, torch.where(negs, z, torch.full_like(z, -torch.inf)), reduce="amax")
        e = torch.where(negs, torch.exp(s / tau - zmax[gidx].nan_to_num(neginf=0.0)), zero)  # [N]
        loss = loss + tau * e / (count(e.detach())[gidx] + F32_EPS)
    n_seq = float(nonempty.sum())
    metrics = {"surrogate/valid_groups": float(valid.double().mean()) if num else 0.0}
    metrics.update(masked_summary(s.detach()[:, None].expand_as(m), m, "surrogate/score", stats=("mean",)))
    return _spread(loss, n_seq / max(num, 1), m), metrics


@register_surrogate(
    "trpa",
    paper="Trust Region Preference Approximation: A simple and stable reinforcement learning algorithm for LLM "
          "reasoning (VERIFIED-CODE)",
    arxiv="2504.04524",
    requires=("group", "row", "ref_logprobs"),
)  # fmt: skip
def trpa_loss(
    inp: LossInputs, *, beta: Positive = 0.1, anisotropy: Positive = 2.5, level_column: str = "level"
) -> tuple[Tensor, dict[str, float]]:
    """TRPA's pairwise preference loss on the current log-probs (exact under several mini-batches and epochs).

    Checked against XueruiSu/Trust-Region-Preference-Approximation @ f372585ed6ec230aa354feb9c8e24e970b615846,
    `verl/trainer/ppo/core_algos.py::compute_pairwise_policy_loss`, called per micro-batch by
    `verl/workers/actor/dp_actor.py`:

        l_i   = mean_t logp_i - mean_t ref_logp_i                 (masked means; ref: LossInputs.ref_logp)
        pairs = every (w, l) of one group with level_w < level_l  (1 is the best level; levels from the
                reward column `level_column`, LossInputs.row["col:<level_column>"])
        h_p   = c_p beta (l_w - l_l),   c_p = anisotropy if level_w == 1 else 1
        loss  = mean_p -log sigmoid(h_p)
        no pair among the rows given: loss = mean_i -log sigmoid(sg_i l_i), sg_i = +1 if level_i == 1 else -1
                over the non-empty rows of groups of two or more (the reference refuses groups of one)

    Per row: each pair's term sits on its winner's row. TRPA's trust region (low-variance KL to pi_old,
    coefficient 0.001) is the regularizer `kl_old`. Defaults beta 0.1, anisotropy 2.5 (`main_TRPA.sh`).
    Metrics: surrogate/pairs, surrogate/fallback, surrogate/log_ratio_mean.
    """
    _check(inp)
    if inp.ref_logp is None:
        raise ValueError("surrogate 'trpa' needs LossInputs.ref_logp (the trainer fills the batch's ref_logprobs when "
                         "'ref_logprobs' is required)")  # fmt: skip
    gidx, num = _dense_groups(inp, "trpa")
    m = inp.mask
    nonempty = m.sum(-1) > 0
    level = _row(inp, f"col:{level_column}", "trpa")
    ratio = (masked_row_mean(inp.logp, m) - masked_row_mean(inp.ref_logp, m)).double()  # l_i [N]
    win, coef = trpa_pairs(gidx, level, nonempty, beta, anisotropy)
    h = coef * (ratio[:, None] - ratio[None, :])  # [N, N]
    pairs = float(win.sum())
    n_seq = float(nonempty.sum())
    if pairs > 0:
        loss = torch.where(win, F.softplus(-h), torch.zeros_like(h)).sum(1)  # -log sigmoid(h), on the winner's row
        scale = n_seq / pairs
    else:
        sign = torch.where(level == 1, torch.ones_like(level), -torch.ones_like(level))
        size = torch.zeros(num, dtype=ratio.dtype, device=ratio.device).index_add_(0, gidx, torch.ones_like(ratio))
        rows = nonempty & (size[gidx] > 1)
        loss = torch.where(rows, F.softplus(-sign * ratio), torch.zeros_like(ratio))
        scale = n_seq / max(float(rows.sum()), 1.0)
    metrics = {"surrogate/pairs": pairs, "surrogate/fallback": float(pairs == 0),
               "surrogate/log_ratio_mean": float(ratio.detach()[nonempty].mean()) if n_seq else 0.0}  # fmt: skip
    return _spread(loss, scale, m), metrics


disco_loss.caps = trpa_loss.caps = SurrogateCaps(aggregation="seq-mean-token-mean")  # the scale above assumes it (compat.check_algo)
