"""Rollout strategies (the `RolloutStrategy` seam, registry `STRATEGIES`): how prompts become
completions through an Engine.

Built in: group (i.i.d. groups), dynamic (DAPO filter + refill), treepo, branch and latr (tree rollouts on a
forking KV cache), april (partial rollouts carried across steps),
igrpo and cog_rethinker (two-stage self-conditioned rollouts), arrol (online pruning with a
quality head), tppo (truncated windows with extended GAE), dars (DARS: extra rollouts for hard prompts), spo_chain (SPO-chain Monte-Carlo cut-point values), step_correction (SCOPE: a judge finds a failed row's first wrong step, a corrector rewrites the rest), scope_ttrl (SCOPE-TTRL: confidence-weighted subgroup pseudo-labels), hill (HiLL: the policy hints the prompts it never solves), masa_meta (MASA: meta rollouts predicting pass rate, length and notions), seele_provisional (SEELE: solution-prefix hints sized to a target accuracy), rorecomp_provisional (RoRecomp: priority and compensation batches for concise reasoning), sol_rl_provisional (Sol-RL: a low-precision candidate pool, the contrastive rows regenerated in full precision), offline_steps (offline step-level data for direct_advantage_provisional), hnpg_offline (on-policy groups plus offline states for hnpg), es_population (an evolution strategy's candidates, each rolled out), soft_thinking (SofT-GRPO's soft-token rollouts), ctrls_latent (CTRLS: latent actions before reasoning steps), dcpo and aepo_entropy (entropy controller), gt_injection (TempSamp-R1: one gold row per group), hapo_temperature (HAPO's per-token temperature), episodes (multi-turn agents against an environment,
covey.envs; docs/agents.md), verifiers (prime-intellect verifiers environments, covey[verifiers]), selfplay (games of several roles, one policy playing each), tool_tree (PORTool: tool-call trajectories branched with env.fork()), dart (DART's curation of episodes: a per-task
success filter and replay of successes), sage_provisional (SAGE's sequential
rollout over task chains with a skill library), training_free_grpo
(Training-Free GRPO: an experience library in the prompt, no weight update; docs/agents.md). See docs/rollouts.md."""

from covey.strategies.april import APRIL
from covey.strategies.arrol import ARRoL
from covey.strategies.branch import BranchStrategy
from covey.strategies.base import STRATEGIES, RolloutContext, RolloutStrategy, register_strategy
from covey.strategies.cog_rethinker import CogRethinker
from covey.strategies.ctrls_latent import CTRLSLatent
from covey.strategies.dars import DarsRollout
from covey.strategies.dart import DART
from covey.strategies.dynamic import DynamicSampling
from covey.strategies.entropy import AEPOEntropy, DCPOStrategy
from covey.strategies.episodes import Episodes
from covey.strategies.es_population import ESPopulation
from covey.strategies.group import GroupStrategy, completion_texts, item_columns, sample_groups
from covey.strategies.gt_injection import GtInjection
from covey.strategies.hapo_temperature import HAPOTemperature
from covey.strategies.hill import HiLL
from covey.strategies.hnpg_offline import HNPGOffline
from covey.strategies.igrpo import IGRPO
from covey.strategies.latr import LATR
from covey.strategies.masa_meta import MasaMeta
from covey.strategies.offline_steps import OfflineSteps
from covey.strategies.pairs import OfflinePairs, ReferencePairs
from covey.strategies.rorecomp import RoRecomp
from covey.strategies.sage import SAGE
from covey.strategies.sol_rl import SolRL
from covey.strategies.scope_ttrl import ScopeTTRL
from covey.strategies.seele import SEELE
from covey.strategies.selfplay import SelfPlay
from covey.strategies.soft_thinking import SoftThinking
from covey.strategies.spo_chain import SPOChain
from covey.strategies.step_correction import StepCorrection
from covey.strategies.swarm import SwarmSharing
from covey.strategies.tool_tree import ToolTree
from covey.strategies.tppo import TPPO
from covey.strategies.training_free import TrainingFreeGRPO
from covey.strategies.treepo import TreePO
from covey.strategies.verifiers_rollout import VerifiersRollout

__all__ = [
    "AEPOEntropy",
    "APRIL",
    "ARRoL",
    "LATR",
    "MasaMeta",
    "OfflinePairs",
    "OfflineSteps",
    "ReferencePairs",
    "RoRecomp",
    "SolRL",
    "STRATEGIES",
    "BranchStrategy",
    "CTRLSLatent",
    "CogRethinker",
    "DART",
    "DCPOStrategy",
    "DarsRollout",
    "DynamicSampling",
    "ESPopulation",
    "Episodes",
    "GroupStrategy",
    "GtInjection",
    "HAPOTemperature",
    "HiLL",
    "HNPGOffline",
    "IGRPO",
    "RolloutContext",
    "RolloutStrategy",
    "SAGE",
    "SEELE",
    "SPOChain",
    "SelfPlay",
    "SoftThinking",
    "ScopeTTRL",
    "StepCorrection",
    "SwarmSharing",
    "TPPO",
    "ToolTree",
    "TrainingFreeGRPO",
    "TreePO",
    "VerifiersRollout",
    "completion_texts",
    "item_columns",
    "register_strategy",
    "sample_groups",
]
