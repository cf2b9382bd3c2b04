"""Difficulty-aware group estimators: NGRPO (virtual max reward), DGPO (MathForge DGAE + DQW), A-GRAE.

All three reshape GRPO's group-relative advantage according to how hard a prompt is for the current
policy (its group's accuracy). Inputs: scalar reward [N] and group ids [N] (DGPO also reads one
reward column and the completion lengths). Output: one advantage per row [N].
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import (
    F64,
    NonNegFloat,
    PosFloat,
    PosInt,
    group_normalise,
    groups_of,
    lengths,
    result,
    reward_matrix,
    scalar_rewards,
)
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["a_grae", "dgpo", "ngrpo"]


@register_advantage(
    "ngrpo", group_relative=True,
    paper="NGRPO: Negative-enhanced Group Relative Policy Optimization",
    arxiv="2509.18851",
)
def ngrpo(
    batch: Rollouts,
    *,
    max_reward: float = 1.0,
    num_virtual: PosInt = 1,
    eps: NonNegFloat = 1e-6,
    singleton: Literal["zero", "raw"] = "zero",
) -> AdvantageResult:
    """NGRPO: group statistics over the group plus ``num_virtual`` virtual rows of reward ``max_reward``.

        ext_g = r_g ++ [max_reward] * m
        A_i   = (r_i - mean(ext_g)) / (std_unbiased(ext_g) + eps)     (only the G real rows are trained)

    Shapes: r [N] -> A [N]. Effect: an all-wrong group gets a negative, non-zero signal; an all-correct
    group (every r = max_reward) gets 0. Assumes rewards <= max_reward. Source:
    nangongrui-ngr/NGRPO `compute_ngrpo_outcome_advantage` (the paper pairs it with asymmetric clipping
    eps_low=0.16, eps_high=0.24: a surrogate setting). singleton: the reference code uses verl's
    G=1 rule (A = r/(1+eps), "raw"); covey's default "zero" gives 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    m = float(num_virtual)
    n = g.size + m  # [B] extended group size
    s1 = g.sum(r) + m * max_reward
    mean = s1 / n
    ss = g.sum((r - mean[g.index]) ** 2) + m * (max_reward - mean) ** 2
    std = (ss / (n - 1)).sqrt()
    adv = (r - mean[g.index]) / (std[g.index] + eps)
    single = g.size[g.index] < 2
    fallback = r / (1.0 + eps) if singleton == "raw" else torch.zeros_like(r)
    return result("ngrpo", torch.where(single, fallback, adv), batch, g)


@register_advantage(
    "dgpo", group_relative=True,
    paper="Harder Is Better: Boosting Mathematical Reasoning via Difficulty-Aware GRPO and Multi-Aspect Question Reformulation",
    arxiv="2601.20614",
)
def dgpo(
    batch: Rollouts,
    *,
    dqw: bool = True,
    temperature: PosFloat = 2.0,
    main_reward: str = "",
    rescale_informative: bool = True,
    eps: NonNegFloat = 1e-4,
) -> AdvantageResult:
    """DGPO (MathForge): DGAE mean-absolute-deviation scaling times DQW question weights.

        d_i   = r_i - mean_g r
        A_i   = G * d_i / (sum_{j in g} |d_j| + eps)                 (DGAE: sum_j |A_j| = G per group)
        acc_g = mean_g of the main reward column (acc_g := 1 if it is 0)
        w_g   = V * softmax_{g informative}(-acc_g / temperature)    (DQW; w_g = 1 for zero-std groups)
        A_i  *= w_{g(i)} * rho,   rho = sum_all L / sum_{informative groups} L   (rescale_informative)

    Shapes: rewards [N, K], lengths [N] -> A [N]. "Informative" = groups whose scalar-reward std is not
    ~0 (torch.isclose); V = their count. Source: AMAP-ML/MathForge `trl-0.20.0/trl/trainer/grpo_trainer.py`
    (enable_dgpo, enable_dgpo_dqw, dgpo_dqw_temp=2.0):
      * ``main_reward``: reward column name for acc (the reference code uses column 0 = ""),
      * acc_g = 0 is replaced by 1 before the softmax, as in the reference code (such a group is
        informative only through another reward column and gets the smallest weight),
      * ``rescale_informative``: the reference multiplies A by ``zero_mask_ratio`` (rho above) so a
        token-mean loss over the whole batch becomes a token mean over the informative groups only;
        its ``global_balancing_ratio`` (local vs global token count across processes) is covey's
        aggregation job (BatchTotals) and is not applied here,
      * groups of one row count as zero-std (the reference code would see std = NaN).
    Edge cases: all groups zero-std -> A = 0, weights 1, rho = 1.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    d = r - g.mean(r)[g.index]
    adv = g.size[g.index] * d / (g.sum(d.abs())[g.index] + eps)
    std = g.std(r)
    informative = (g.size > 1) & ~torch.isclose(std, torch.zeros_like(std))  # [B]
    v = int(informative.sum())
    weights = torch.ones(g.num, dtype=F64, device=r.device)
    if dqw and v > 0:
        cols = reward_matrix(batch)
        if main_reward and main_reward not in batch.reward_names:
            raise RolloutsError(
                f"advantage 'dgpo' parameter main_reward={main_reward!r} is not a reward column; "
                f"columns are {list(batch.reward_names)}"
            )
        col = cols[:, batch.reward_names.index(main_reward) if main_reward else 0]
        acc = g.mean(col)  # [B]
        acc = torch.where(torch.isclose(acc, torch.zeros_like(acc)), torch.ones_like(acc), acc)
        weights[informative] = v * torch.softmax(-acc[informative] / temperature, dim=0)
    rho = 1.0
    if rescale_informative and v > 0:
        length = g.sum(lengths(batch))  # [B]
        inf_len = float(length[informative].sum())
        rho = float(length.sum()) / inf_len if inf_len > 0 else 1.0
    adv = adv * weights[g.index] * rho
    metrics = {"informative_groups": float(v), "informative_token_ratio": rho, "dqw_max": float(weights.max())}
    return result("dgpo", adv, batch, g, metrics=metrics)


@register_advantage(
    "a_grae", group_relative=True,
    paper="Unveiling Implicit Advantage Symmetry: Why GRPO Struggles with Exploration and Difficulty Adaptation",
    arxiv="2602.05548",
)
def a_grae(batch: Rollouts, *, alpha: PosFloat = 1.0, eps: NonNegFloat = 1e-6) -> AdvantageResult:
    """A-GRAE: asymmetric, curriculum-weighted GRPO advantage (released-code formula).

        A0_i   = (r_i - p_g) / (std_g + eps)              GRPO, p_g = group mean reward (accuracy)
        pbar   = mean over groups of p_g                    batch accuracy, the training-progress proxy
        A_diff = 0.5 * A0 / (sqrt(p_g) + eps)               "difficulty focus"
        A_easy = 0.5 * A0 / (1 - sqrt(p_g) + eps)           "easy focus"
        A      = (1 - pbar) * A_easy + pbar * A_diff
        A      = A * min(1, pbar / alpha)   where A > 0     (asymmetric suppression of positives)

    Shapes: r [N] -> A [N]. Assumes rewards in [0, 1] (p_g is an accuracy; sqrt of a negative mean
    raises). alpha: 1.0 in the math scripts, 0.5 for geo3k / medical.
    CAVEAT (UNVERIFIED): in Yu7-code/A-GRAE the branch is taken only when ``grpo_weight == 2.0``
    exactly, while the trainer anneals grpo_weight from 2.0 towards 1 (`ray_trainer.py`), so the
    released run applies this formula only at global step 0 and plain GRPO afterwards. covey applies
    the formula at every step; whether the paper intends an annealed mixture could not be checked.
    Edge cases: p_g in {0, 1} or G = 1 -> A0 = 0 -> A = 0. pbar weighs groups equally and uses a
    singleton group's real mean (the reference applies verl's rule and counts it as 0).
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    p = g.mean(r)  # [B]
    if (p < 0).any():
        raise RolloutsError(
            f"advantage 'a_grae' needs rewards in [0, 1] (group accuracies); got group mean {float(p.min())}"
        )
    a0 = group_normalise(r, g, eps=eps, scale="group", singleton="zero")
    pbar = float(p.mean())
    sq = p.sqrt()[g.index]
    a_diff = 0.5 * a0 / (sq + eps)
    a_easy = 0.5 * a0 / (1.0 - sq + eps)
    adv = (1.0 - pbar) * a_easy + pbar * a_diff
    adv = torch.where(adv > 0, adv * min(1.0, pbar / alpha), adv)
    return result("a_grae", adv, batch, g, metrics={"pbar": pbar})
