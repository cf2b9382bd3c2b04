"""Advantages written as sums over pairs of rows of the same group.

Both estimators here build `[N, N]` pair matrices restricted to same-group pairs (vectorised, no loop
over rows or groups; memory O(N^2), e.g. 4096 rows -> 16.8M float64 = 134 MB per matrix).

    dagrpo_provisional   GRPO's advantage as (1/G) sum_j (r_i - r_j) / sigma_g, with indistinct pairs masked
    trpa                 the gradient of TRPA's Bradley-Terry loss over preference-level pairs, as an advantage
"""

from __future__ import annotations

import torch
from torch import Tensor

from covey.algos.advantages._groups import (
    F64,
    Groups,
    NonNegFloat,
    PosFloat,
    groups_of,
    result,
    reward_matrix,
    scalar_rewards,
    seq_mean_logprob,
    token_field,
)
from covey.algos.aggregation import masked_row_mean
from covey.algos.registry import AdvantageCaps, AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["dagrpo_provisional", "trpa", "trpa_pairs"]

TIE_TOL = 1e-6  # rewards are float32: a gap of exactly tau (0.9 - 0.8 in float32 is 0.09999996) counts as reaching it


def _same_group(g: Groups) -> Tensor:
    """[N, N] bool: rows i and j belong to the same group."""
    return g.index[:, None] == g.index[None, :]


def _column(batch: Rollouts, name: str, param: str, method: str) -> Tensor:
    """[N] float64 reward column `name` (checked finite), with an error naming the parameter."""
    cols = reward_matrix(batch)
    if not name:
        raise RolloutsError(f"advantage {method!r} needs {param}: the name of a reward column "
                            f"(columns are {list(batch.reward_names)})")  # fmt: skip
    if name not in batch.reward_names:
        raise RolloutsError(f"advantage {method!r} parameter {param}={name!r} is not a reward column; "
                            f"columns are {list(batch.reward_names)}")  # fmt: skip
    return cols[:, batch.reward_names.index(name)]


def trpa_pairs(gidx: Tensor, level: Tensor, nonempty: Tensor, beta: float, anisotropy: float) -> tuple[Tensor, Tensor]:
    """TRPA's pairs: `win` [N, N] bool, row w beats row l (same group, level_w < level_l, both rows
    non-empty; 1 is the best level), and `coef` [N, 1] = c_w beta, c_w = anisotropy if level_w == 1 else 1."""
    win = (gidx[:, None] == gidx[None, :]) & (level[:, None] < level[None, :]) & nonempty[:, None] & nonempty[None, :]
    coef = torch.where(level == 1, torch.full_like(level, anisotropy), torch.ones_like(level))[:, None] * beta
    return win, coef


@register_advantage(
    "dagrpo_provisional", group_relative=True,
    paper="DaGRPO: Rectifying Gradient Conflict in Reasoning via Distinctiveness-Aware Group Relative Policy "
          "Optimization (UNVERIFIED reconstruction)",
    arxiv="2512.06337",
)  # fmt: skip
def dagrpo_provisional(
    batch: Rollouts, *, score_column: str = "", tau: NonNegFloat = 0.1, eps: NonNegFloat = 1e-6
) -> AdvantageResult:
    """DaGRPO sequence-level gradient rectification (UNVERIFIED reconstruction). Shapes: r, q [N] -> A [N].

    Uses the identity grpo_i = (1/G) sum_j (r_i - r_j) / sigma_g and drops the pairs whose members a
    fine-grained score q cannot tell apart:

        q_i   = reward column ``score_column`` (e.g. an LLM judge's quality score in [0, 1])
        m_ij  = 1[ |q_i - q_j| >= tau ]          (within 1e-6: rewards are float32)
        A_i   = (1/G) sum_{j in g} m_ij (r_i - r_j) / (sigma_g + eps)     sigma_g unbiased std of r in g

    r is the scalar reward (give the score column weight 0 if it should only gate pairs). Status:
    UNVERIFIED: only the abstract's mechanism ("fine-grained scoring
    to dynamically mask sample pairs with low distinctiveness") was read; the mask form, tau (suggested
    0.1 on a [0, 1] score) and the normaliser are covey's. The paper's second part (off-policy anchors
    for all-wrong groups) is a rollout strategy, not built.
    Edge cases: tau = 0 (all m_ij = 1) is exactly `grpo`; G = 1 or all rewards equal -> A = 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    q = _column(batch, score_column, "score_column", "dagrpo_provisional")
    same = _same_group(g)
    keep = same & ((q[:, None] - q[None, :]).abs() >= tau - TIE_TOL)
    sigma = g.std(r)[g.index]
    size = g.size[g.index]
    diff = torch.where(keep, r[:, None] - r[None, :], torch.zeros((), dtype=F64, device=r.device))
    adv = diff.sum(-1) / size / (sigma + eps)
    off_diag = same & ~torch.eye(len(r), dtype=torch.bool, device=r.device)
    masked = float((off_diag & ~keep).sum()) / max(float(off_diag.sum()), 1.0)
    return result("dagrpo_provisional", adv, batch, g, metrics={"masked_pair_frac": masked})


@register_advantage(
    "trpa", group_relative=True,
    paper="Trust Region Preference Approximation: A simple and stable reinforcement learning algorithm for LLM "
          "reasoning (VERIFIED-CODE; advantage part, KL to pi_old: regularizer kl_old)",
    arxiv="2504.04524",
    requires=("ref_logprobs",),
)  # fmt: skip
def trpa(
    batch: Rollouts, *, beta: PosFloat = 0.1, anisotropy: PosFloat = 2.5, level_column: str = "level"
) -> AdvantageResult:
    """TRPA gradient-equivalent advantage. Shapes: level [N], logp / ref_logp / mask [N, T] -> A [N].

    Released loss (XueruiSu/Trust-Region-Preference-Approximation `compute_pairwise_policy_loss`):
        l_i   = mean_t logp_i - mean_t ref_logp_i                  (masked means)
        pairs = every (w, l) of one group with level_w < level_l  (1 is the best level)
        h_p   = c_p * beta * (l_w - l_l),   c_p = anisotropy if level_w == 1 else 1
        loss  = mean_p -log sigmoid(h_p)
        no pair in the batch: loss = mean_i -log sigmoid(s_i l_i), s_i = +1 if level_i == 1 else -1
    With surrogate "reinforce" (or PPO-clip on-policy) and aggregation "seq-mean-token-mean" the
    gradients are equal at theta = theta_old (where logp = behaviour_logprobs) when
        A_k = (N_seq / P) [ sum_{p: k wins} (1 - sigmoid(h_p)) c_p beta - sum_{p: k loses} (1 - sigmoid(h_p)) c_p beta ]
        fallback: A_i = (N_seq / N_f) (1 - sigmoid(s_i l_i)) s_i    over the N_f non-empty rows of groups
                  with >= 2 rows (rows of groups of one get 0: the reference raises on them)
    P = number of pairs in the whole batch (the reference averages per micro-batch: covey uses the
    batch so micro-batching does not change the step). Levels come from the reward column
    ``level_column`` (e.g. 1 correct, 2 wrong answer, 3 incomplete, 4 bad format; give it weight 0:
    TRPA uses no scalar reward). Defaults beta 0.1, anisotropy 2.5 (`main_TRPA.sh`).
    TRPA's trust region, a low-variance KL to pi_old with coefficient 0.001, is the regularizer `kl_old`.
    Edge cases: rows with L = 0 are in no pair; a group of one row or of a single level has no pair
    (the reference raises on groups of one). Exact for one update per batch only: with several the
    config is refused unless `algo.surrogate` is the exact `trpa` surrogate (`covey.algos.group_losses`),
    which recomputes the loss on every mini-batch as the reference does.
    """
    g = groups_of(batch)
    level = _column(batch, level_column, "level_column", "trpa")
    score, n_tok = seq_mean_logprob(batch, "trpa")
    ref = token_field(batch, "ref_logprobs", "trpa")
    mask = batch.completion_mask.to(F64)
    ratio = score - masked_row_mean(ref, mask)  # l_i
    nonempty = n_tok > 0
    n_seq = float(nonempty.sum())
    win, coef = trpa_pairs(g.index, level, nonempty, beta, anisotropy)  # [N, N], [N, 1] = c_p beta
    h = coef * (ratio[:, None] - ratio[None, :])
    w = torch.where(win, (1 - torch.sigmoid(h)) * coef, torch.zeros((), dtype=F64, device=h.device))  # [N, N]
    pairs = float(win.sum())
    if pairs > 0:
        adv = (n_seq / pairs) * (w.sum(1) - w.sum(0))
    else:
        sign = torch.where(level == 1, torch.ones_like(level), -torch.ones_like(level))
        rows = nonempty & (g.size[g.index] > 1)  # the reference refuses groups of one: they get 0 here
        n_f = max(float(rows.sum()), 1.0)
        adv = torch.where(rows, (n_seq / n_f) * (1 - torch.sigmoid(sign * ratio)) * sign, torch.zeros_like(ratio))
    metrics = {"pairs": pairs, "fallback": float(pairs == 0), "log_ratio_mean": float(ratio[nonempty].mean()) if n_seq else 0.0}
    return result("trpa", adv, batch, g, metrics=metrics)


trpa.caps = AdvantageCaps(exact_surrogate="trpa")  # several updates per batch: the surrogate that recomputes the loss (compat.check_algo)
