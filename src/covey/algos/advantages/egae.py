"""T-PPO's Extended GAE: advantages of incomplete responses, bootstrapped from a value at the cut.

    tppo    reads the [N, T] advantages the `tppo` rollout strategy computed with `egae` (it needs
            the strategy's value head and the per-token values, so the estimator only checks and
            hands them over).
"""

from __future__ import annotations

import torch
from torch import Tensor

from covey.algos.advantages._groups import groups_of, result
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts, RolloutsError

__all__ = ["egae", "tppo"]


def egae(values: Tensor, reward: float, finished: bool, *, gamma: float = 1.0, lam: float = 0.95) -> Tensor:
    """Advantages of the last len(values) - 1 tokens of one response.

    values [L + 1]: V(s_t) for the states before each of the L tokens, and V(s_L) after the last one
    (ignored when `finished`: the episode ended, V = 0). The terminal `reward` is paid at the last
    token of a finished response; an unfinished one pays nothing yet and bootstraps from V(s_L):

        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        A_t     = sum_k (gamma * lam)^k delta_{t+k}          (over t .. L-1)
    Returns A [L] float64. On a complete response this is ordinary GAE; with V = 0 and no reward, 0.
    """
    v = values.to(torch.float64).clone()
    n = v.numel() - 1
    if finished:
        v[-1] = 0.0
    r = torch.zeros(n, dtype=torch.float64)
    if finished and n:
        r[-1] = reward
    adv = torch.zeros(n, dtype=torch.float64)
    run = 0.0
    for t in range(n - 1, -1, -1):
        run = float(r[t] + gamma * v[t + 1] - v[t]) + gamma * lam * run
        adv[t] = run
    return adv


@register_advantage("tppo", paper="Truncated Proximal Policy Optimization", arxiv="2506.15050", requires=("tppo_advantages",))
def tppo(batch: Rollouts) -> AdvantageResult:
    """T-PPO's Extended GAE advantages ([N, T]), computed by the `tppo` rollout strategy (its value
    head and per-token values) and stored in `batch.token_advantages`."""
    adv = batch.token_advantages
    shape = tuple(batch.completion_mask.shape)
    if adv is None:
        raise RolloutsError("advantage 'tppo' needs batch.token_advantages: use rollout.strategy tppo")
    if tuple(adv.shape) != shape:
        raise RolloutsError(f"token_advantages has shape {tuple(adv.shape)}, the batch needs {shape}")
    return result("tppo", adv.to(torch.float64) * batch.completion_mask.to(torch.float64), batch, groups_of(batch))
