"""Rollout strategies (the `RolloutStrategy` seam, registry `STRATEGIES`): how prompts become
completions through an Engine.

Built in: group (i.i.d. groups), dynamic (DAPO filter + refill), treepo, branch and latr (tree rollouts on a
forking KV cache), april (partial rollouts carried across steps),
igrpo and cog_rethinker (two-stage self-conditioned rollouts), arrol (online pruning with a
quality head), tppo (truncated windows with extended GAE), dars (DARS: extra rollouts for hard prompts), spo_chain (SPO-chain Monte-Carlo cut-point values), step_correction (SCOPE: a judge finds a failed row's first wrong step, a corrector rewrites the rest), dcpo and aepo_entropy (entropy controller), hapo_temperature (HAPO's per-token temperature), episodes (multi-turn agents against an environment,
covey.envs; docs/agents.md), selfplay (games of several roles, one policy playing each), tool_tree (PORTool: tool-call trajectories branched with env.fork()), verifiers (prime-intellect verifiers environments, covey[verifiers]). See docs/rollouts.md."""

from covey.strategies.april import APRIL
from covey.strategies.arrol import ARRoL
from covey.strategies.branch import BranchStrategy
from covey.strategies.base import STRATEGIES, RolloutContext, RolloutStrategy, register_strategy
from covey.strategies.cog_rethinker import CogRethinker
from covey.strategies.dars import DarsRollout
from covey.strategies.dynamic import DynamicSampling
from covey.strategies.entropy import AEPOEntropy, DCPOStrategy
from covey.strategies.episodes import Episodes
from covey.strategies.group import GroupStrategy, completion_texts, item_columns, sample_groups
from covey.strategies.hapo_temperature import HAPOTemperature
from covey.strategies.igrpo import IGRPO
from covey.strategies.latr import LATR
from covey.strategies.pairs import OfflinePairs, ReferencePairs
from covey.strategies.selfplay import SelfPlay
from covey.strategies.spo_chain import SPOChain
from covey.strategies.step_correction import StepCorrection
from covey.strategies.swarm import SwarmSharing
from covey.strategies.tool_tree import ToolTree
from covey.strategies.tppo import TPPO
from covey.strategies.treepo import TreePO
from covey.strategies.verifiers_rollout import VerifiersRollout

__all__ = [
    "AEPOEntropy",
    "APRIL",
    "ARRoL",
    "LATR",
    "OfflinePairs",
    "ReferencePairs",
    "STRATEGIES",
    "BranchStrategy",
    "CogRethinker",
    "DCPOStrategy",
    "DarsRollout",
    "DynamicSampling",
    "Episodes",
    "GroupStrategy",
    "HAPOTemperature",
    "IGRPO",
    "RolloutContext",
    "RolloutStrategy",
    "SPOChain",
    "SelfPlay",
    "StepCorrection",
    "SwarmSharing",
    "TPPO",
    "ToolTree",
    "TreePO",
    "VerifiersRollout",
    "completion_texts",
    "item_columns",
    "register_strategy",
    "sample_groups",
]
