"""Build small `Rollouts` batches by hand for the advantage-estimator tests."""

from __future__ import annotations

import torch

from covey.rollouts import Rollouts


def rollouts(
    rewards,
    groups=None,
    *,
    lengths=None,
    width=None,
    logprobs=None,
    ids=None,
    entropies=None,
    ref_logprobs=None,
    reward_names=None,
    reward_weights=None,
) -> Rollouts:
    """A scored batch.

    rewards: list of N floats (one column) or N lists of K floats. groups: N group ids (default one
    group). lengths: real tokens per row (default: width, which defaults to the width of `ids`,
    else max(lengths), else 4).
    logprobs / ref_logprobs / entropies: a scalar per row (filled over its tokens) or an [N, T] list.
    ids: [N, T] token ids (default: distinct per row, so no two rows share a token).
    """
    r = torch.tensor(rewards, dtype=torch.float32)
    r = r[:, None] if r.dim() == 1 else r
    n, k = r.shape
    width = width or (len(ids[0]) if ids is not None else None)
    lengths = [width or 4] * n if lengths is None else list(lengths)
    t = width or max(max(lengths), 1)
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).float()

    def per_token(x, default=0.0):
        if x is None:
            return torch.full((n, t), default) * mask
        x = torch.tensor(x, dtype=torch.float32)
        return (x[:, None].expand(n, t) if x.dim() == 1 else x) * mask

    comp = torch.tensor(ids, dtype=torch.long) if ids is not None else 1000 * torch.arange(1, n + 1)[:, None] + torch.arange(t)[None, :]
    return Rollouts(
        prompt_ids=[torch.tensor([1, 2], dtype=torch.long) for _ in range(n)],
        completion_ids=comp,
        completion_mask=mask,
        behaviour_logprobs=per_token(logprobs, -1.0),
        group=torch.tensor(groups if groups is not None else [0] * n, dtype=torch.long),
        prompt_id=torch.tensor(groups if groups is not None else [0] * n, dtype=torch.long),
        rewards=r,
        reward_names=tuple(reward_names or [f"r{j}" for j in range(k)]),
        reward_weights=None if reward_weights is None else torch.tensor(reward_weights, dtype=torch.float32),
        entropies=None if entropies is None else per_token(entropies),
        ref_logprobs=None if ref_logprobs is None else per_token(ref_logprobs),
    )
