"""MSSR: single-rollout advantage against the `spo` sampler's Beta baseline, with entropy-based shaping.

Paper: "Stable and Efficient Single-Rollout RL for Multimodal Reasoning" (MSSR, Multimodal Stabilized
Single-Rollout), arXiv 2512.18215. Status PARTIAL: the Beta-posterior
baseline and "entropy-based advantage shaping that adaptively regularizes advantage magnitudes" are
confirmed by the abstract; no code was released. The shaping term is the one MSSR cites from
group-based RLVR (Cheng et al., "Reasoning with Exploration: An Entropy Perspective", arXiv
2506.14758), with its defaults; that MSSR uses exactly this form is UNVERIFIED.
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, PosFloat, groups_of, result, scalar_rewards, token_field
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["mssr"]


def _baseline(batch: Rollouts) -> torch.Tensor:
    base = batch.baseline
    if base is None:
        raise RolloutsError(
            "advantage 'mssr' needs batch.baseline, the per-prompt Beta baseline the spo sampler writes: "
            "set sampler: {name: spo}"
        )
    if not isinstance(base, torch.Tensor) or tuple(base.shape) != (len(batch),):
        got = tuple(base.shape) if isinstance(base, torch.Tensor) else type(base).__name__
        raise RolloutsError(f"advantage 'mssr': batch.baseline must be a [N]=({len(batch)},) tensor, got {got}")
    return base.to(F64)


@register_advantage(
    "mssr",
    paper="Stable and Efficient Single-Rollout RL for Multimodal Reasoning (MSSR; PARTIAL: shaping form from arXiv 2506.14758)",
    arxiv="2512.18215",
    requires=("entropies",),
)
def mssr(
    batch: Rollouts,
    *,
    alpha_h: NonNegFloat = 0.4,
    kappa: PosFloat = 2.0,
    normalise: bool = False,
    eps: NonNegFloat = 1e-8,
) -> AdvantageResult:
    """MSSR token advantage: a_i = r_i - p_hat_i, plus a bounded entropy bonus. Shapes: r [N], H [N, T] -> A [N, T].

        p_hat_i = alpha_q / (alpha_q + beta_q)        the spo sampler's per-prompt Beta posterior mean,
                                                      before this step's update (batch.baseline)
        a_i     = r_i - p_hat_i                       (normalise=True: (a - mean_batch a) / (std_batch a + eps),
                                                      as `spo`; whether MSSR does this is UNVERIFIED)
        psi_it  = min(alpha_h * sg(H_it), |a_i| / kappa)         H: sampling entropy (rollouts.entropies)
        A_it    = a_i + psi_it                        0 on masked tokens

    psi >= 0, so the shaping enlarges positive and shrinks negative advantages, and never flips a sign
    (|psi| <= |a| / kappa, kappa >= 1 for that guarantee). Defaults alpha_h = 0.4, kappa = 2 (Cheng et
    al.'s values; MSSR's own UNVERIFIED). Use with `sampler: {name: spo, n: 1}` (single rollout).
    Edge cases: a = 0 gives no shaping; a batch of one row with normalise=True gets a = 0.
    """
    g = groups_of(batch)
    r = scalar_rewards(batch)
    a = r - _baseline(batch).to(r.device)
    if normalise:
        a = (a - a.mean()) / (a.std() + eps) if a.numel() > 1 else torch.zeros_like(a)
    ent = token_field(batch, "entropies", "mssr")  # 0 on masked tokens, float64
    psi = torch.minimum(alpha_h * ent, (a.abs() / kappa)[:, None])
    mask = batch.completion_mask.to(F64)
    adv = (a[:, None] + psi) * mask
    m = mask > 0
    metrics = {
        "psi_mean": float(psi[m].mean()) if m.any() else 0.0,
        "psi_capped_frac": float((alpha_h * ent >= (a.abs() / kappa)[:, None])[m].to(F64).mean()) if m.any() else 0.0,
    }
    return result("mssr", adv, batch, g, metrics=metrics)
