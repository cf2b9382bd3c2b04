"""Rollout strategies (the `RolloutStrategy` seam, registry `STRATEGIES`): how prompts become
completions through an Engine.

Built in: group (i.i.d. groups), dynamic (DAPO filter + refill), treepo, branch and latr (tree rollouts on a
forking KV cache), april (partial rollouts carried across steps),
igrpo and cog_rethinker (two-stage self-conditioned rollouts), arrol (online pruning with a
quality head), tppo (truncated windows with extended GAE). See docs/rollouts.md."""

from covey.rollout.april import APRIL
from covey.rollout.arrol import ARRoL
from covey.rollout.branch import BranchStrategy
from covey.rollout.base import STRATEGIES, RolloutContext, RolloutStrategy, register_strategy
from covey.rollout.cog_rethinker import CogRethinker
from covey.rollout.dynamic import DynamicSampling
from covey.rollout.group import GroupStrategy, completion_texts, item_columns, sample_groups
from covey.rollout.igrpo import IGRPO
from covey.rollout.latr import LATR
from covey.rollout.tppo import TPPO
from covey.rollout.treepo import TreePO

__all__ = [
    "APRIL",
    "ARRoL",
    "LATR",
    "STRATEGIES",
    "BranchStrategy",
    "CogRethinker",
    "DynamicSampling",
    "GroupStrategy",
    "IGRPO",
    "RolloutContext",
    "RolloutStrategy",
    "TPPO",
    "TreePO",
    "completion_texts",
    "item_columns",
    "register_strategy",
    "sample_groups",
]
