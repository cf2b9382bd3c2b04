"""Advantages of the entropy-steering methods whose controller lives in a rollout strategy
(`covey.strategies.entropy`): DCPO and AEPO (Arbitrary Entropy PO). Both read the controller's
choice from `Rollouts.controller`.

Status VERIFIED-CODE per covey's objectives spec (§2.4, §2.11), which read 597358816/DCPO
@ 33f8073e302d (`verl/trainer/ray_trainer.py::fit`, branches `alg == "DCPO"` / `"AEPO"`,
`_compute_bool_reward_by_score`, `_select_by_advantage`, `_compute_old_log_probs(batch, temperature=T)`;
`verl/trainer/config.py`; `examples/qwen-math-7b-{DCPO,AEPO}.sh`); the repository was not in this
session's code store, so the formulas follow the spec's reading and its hand-checked vectors.
"""

from __future__ import annotations

from typing import Literal

import torch

from covey.algos.advantages._groups import F64, NonNegFloat, PosFloat, group_normalise, groups_of, result, scalar_rewards, token_field
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["aepo_entropy", "dcpo"]


def _controller(batch: Rollouts, method: str, keys: tuple[str, ...]) -> dict[str, float]:
    info = batch.controller or {}
    missing = [k for k in keys if k not in info]
    if missing:
        raise RolloutsError(f"advantage {method!r} needs batch.controller {missing} from its rollout strategy: "
                            f"set rollout.strategy: {{name: {method}}}")  # fmt: skip
    return info


@register_advantage(
    "dcpo", group_relative=True,
    paper="Distribution-Centric Policy Optimization (DCPO; VERIFIED-CODE per spec)",
    arxiv="2601.12730",
    requires=("probe_logprobs", "probe_temperature"),
)  # fmt: skip
def dcpo(
    batch: Rollouts,
    *,
    alpha_cap: NonNegFloat = 0.1,
    threshold: float = 0.05,
    eps: PosFloat = 1e-6,
    no_correct: Literal["zero", "nan"] = "zero",
) -> AdvantageResult:
    """DCPO token advantage: GRPO shrunk by (1 - alpha), plus alpha x an importance-weighted REINFORCE
    term on correct rows toward pi_old at the controller's temperature T. Shapes: r [N] -> A [N, T].

        b_i    = 1[r_i > threshold];   p = mean_i b_i                   (fraction of correct rows)
        alpha  = min(|h0 - h_hat|, alpha_cap) / p;   alpha = alpha / (alpha + 1)
        rho_it = exp(probe_logp_it - old_logp_it)     probe: pi_old at T (trainer-filled, `probe_logprobs`);
                                                      old: old_logprobs if recomputed, else behaviour log-probs
        A_it   = (1 - alpha) grpo_i + alpha b_i rho_it
    h_hat, h0 and T come from the `dcpo` strategy's controller (T = 1.2 if h_hat <= h0 else 0.8).
    no_correct: p = 0 gives alpha = 0 ("zero", covey: the b-term is 0 anyway) or NaN ("nan": the
    released code's division by zero, reproduced on purpose).
    """
    info = _controller(batch, "dcpo", ("h_hat", "h0"))
    g = groups_of(batch)
    r = scalar_rewards(batch)
    grpo = group_normalise(r, g, eps=eps, scale="group", singleton="zero")
    b = (r > threshold).to(F64)
    p = float(b.mean()) if len(b) else 0.0
    if p > 0:
        alpha = min(abs(info["h0"] - info["h_hat"]), alpha_cap) / p
        alpha = alpha / (alpha + 1.0)
    else:
        alpha = float("nan") if no_correct == "nan" else 0.0
    probe = token_field(batch, "probe_logprobs", "dcpo")
    old = token_field(batch, "old_logprobs" if batch.old_logprobs is not None else "behaviour_logprobs", "dcpo")
    mask = batch.completion_mask.to(F64)
    rho = torch.exp(probe - old) * mask
    adv = ((1.0 - alpha) * grpo[:, None] + alpha * b[:, None] * rho) * mask
    m = (mask > 0) & (b[:, None] > 0)
    metrics = {"alpha": alpha, "correct_frac": p, "h_hat": info["h_hat"],
               "rho_mean": float(rho[m].mean()) if m.any() else 1.0}  # fmt: skip
    return result("dcpo", adv, batch, g, metrics=metrics)


@register_advantage(
    "aepo_entropy", group_relative=True,
    paper="Arbitrary Entropy Policy Optimization (AEPO; VERIFIED-CODE per spec)",
    arxiv="2510.08141",
    requires=("reinforce_rows",),
)  # fmt: skip
def aepo_entropy(batch: Rollouts, *, eps: PosFloat = 1e-6) -> AdvantageResult:
    """AEPO: GRPO on the step's rows; rows whose advantage the `aepo_entropy` strategy fixed keep it:
    the REINFORCE rows (sampled at the controller's temperature, `batch.fixed_advantage` = 1, each in a
    group of its own) and, under the strategy's `mode: replace`, the main rows kept, whose GRPO the
    strategy took on their full groups before the first k rows were replaced (597358816/DCPO @
    33f8073e302db6cc04a1e064df89242ba8f236b0, `verl/trainer/ray_trainer.py::fit`, branch AEPO).
    Shapes: r [N] -> A [N].

        A_i = fixed_i                 where fixed_advantage_i is not NaN
            = grpo_i                  otherwise   (r - mean_g) / (std_g + eps), unbiased std
    A batch without fixed rows (no kept re-sampled row this step) is plain GRPO.
    """
    g = groups_of(batch)
    adv = group_normalise(scalar_rewards(batch), g, eps=eps, scale="group", singleton="zero")
    fixed = batch.fixed_advantage
    n_fixed = 0
    if fixed is not None:
        fixed = fixed.to(F64).to(adv.device)
        is_fixed = ~torch.isnan(fixed)
        n_fixed = int(is_fixed.sum())
        adv = torch.where(is_fixed, fixed, adv)
    return result("aepo_entropy", adv, batch, g, metrics={"fixed_rows": float(n_fixed)})
