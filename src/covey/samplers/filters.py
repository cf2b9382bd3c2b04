"""Group filters: find groups that carry no learning signal (DAPO dynamic sampling).

A group whose scalar rewards are all equal gets zero advantage under every group-relative estimator,
so it only costs compute. DAPO keeps a group iff std(rewards) > 0. verl-recipe
(`dapo_ray_trainer.py`) also keeps groups of one sample; covey does not: a single sample's
group-relative advantage is zero, so it carries no signal either. The `dynamic` rollout strategy
regenerates until enough groups are kept.
"""

from __future__ import annotations

import torch  # noqa: F401  (the doctest below)
from torch import Tensor

from covey.rollouts import Groups

__all__ = ["informative_groups"]


def informative_groups(rewards: Tensor, group: Tensor) -> Tensor:
    """[N] bool: True for rows whose group has non-constant reward (a singleton never does).

    rewards: [N] scalar reward; group: [N] group ids (any order).
    >>> informative_groups(torch.tensor([1., 1., 0., 1.]), torch.tensor([0, 0, 1, 1])).tolist()
    [False, False, True, True]
    """
    groups = Groups.of(group)
    return (groups.amax(rewards) > groups.amin(rewards))[groups.index]
