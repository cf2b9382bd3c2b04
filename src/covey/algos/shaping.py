"""Reward shaping applied to the scalar reward before advantages (not a registry axis).

Covers DAPO's soft overlong punishment. Task rewards live in `covey.rewards`; the trainer decides
when to add this term (when `AlgoConfig.overlong` is set) and adds it to the scalar reward.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["overlong_penalty"]


def overlong_penalty(lengths: Tensor, max_len: int, buffer_len: int, penalty_factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment, one value per completion [N] (float32, <= 0).

    Paper: "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476),
    eq. 13; verl `DAPORewardManager`, TRL `get_soft_overlong_punishment`.

        expected = max_len - buffer_len
        R(|y|)   = 0                                           |y| <= expected
                 = -(|y| - expected) / buffer_len * factor     expected < |y| <= max_len
                 = -factor                                     |y| > max_len   (paper's -1; verl would
                                                               keep going linearly, but generation stops
                                                               at max_len so verl never sees it)
    Args:
        lengths: [N] completion lengths in tokens (int or float tensor).
        max_len: generation budget L_max (max_new_tokens).
        buffer_len: L_cache, the soft zone width, 0 < buffer_len <= max_len.
        penalty_factor: scale of the penalty (DAPO 1.0).

    >>> overlong_penalty(torch.tensor([16000, 16384, 18432, 20480]), 20480, 4096).tolist()
    [0.0, 0.0, -0.5, -1.0]
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"overlong_penalty: buffer_len must be in (0, max_len={max_len}]; got {buffer_len}")
    if lengths.dim() != 1:
        raise ValueError(f"overlong_penalty: lengths must be [N]; got shape {tuple(lengths.shape)}")
    if penalty_factor < 0:
        raise ValueError(f"overlong_penalty: penalty_factor must be >= 0; got {penalty_factor}")
    exceed = lengths.to(torch.float32) - float(max_len - buffer_len)
    # 0 - x (not -x) so in-budget lengths give +0.0, not -0.0
    return 0.0 - (exceed / buffer_len * penalty_factor).clamp(min=0.0, max=penalty_factor)
