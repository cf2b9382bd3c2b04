"""Advantage estimators: map a scored `Rollouts` batch to advantages ([N] or [N, T]).

Importing this package registers every built-in estimator in `covey.algos.registry.ADVANTAGES`.
Each is a plain function ``fn(batch, *, **params) -> AdvantageResult`` (see the registry docstring);
its keyword-only parameters and defaults are its configuration. Files by family:

    grpo.py          grpo, dr_grpo, rloo, reinforce_pp_baseline   (mean baselines)
    hapo.py          hapo                                        (token-weighted group mean/std, GRPO fallback)
    median.py        mc_grpo                                     (median baseline, pivot excluded)
    multi_reward.py  gdpo                                        (per-reward-column normalisation)
    difficulty.py    ngrpo, dgpo, a_grae                         (difficulty-aware reweighting)
    risk.py          riskpo                                      (Mixed-VaR over prompt bundles)
    confidence.py    ace, xrpo, arm                              (log-prob-based modulation)
    token_credit.py  gtpo                                        ([N, T] conflict-token credit)
    drpo.py          drpo                                        (discriminative loss as advantage)
    disco.py         disco                                       (DisCO / DisCO-b discriminative loss as advantage)
    brpo.py          brpo                                        (bootstrapped in-group reference)
    identity.py      identity                                    (A = r, for pre-normalised rewards: arenarl)
    tree.py          treepo, branch_grpo                         (tree rollouts: Rollouts.tree_path)
    spo_segment.py   spo_chain, spo_tree                         (SPO segment advantages from MC values, [N, T])
    entropy_control.py dcpo, aepo_entropy                    (entropy controller in the dcpo / aepo_entropy strategies)
    egae.py          tppo                                        (T-PPO extended GAE, from the tppo strategy)
    spo.py           spo                                         (sampler's value baseline, batch-normalised)
    mssr.py          mssr                                        (spo baseline + entropy shaping, [N, T])
    pairwise.py      dagrpo_provisional, trpa                    (sums over same-group pairs of rows)
    oblr.py          oblr_baseline                               (OBLR-PO gradient-weighted baseline, [N] or [N, T])
    polychromic.py   polychromic                                 (set-level reward x diversity, shared per row)
    rover.py         rover                                       (ROVER: batch success-rate shaping of binary rewards)
    noisy_verifier.py noisy_verifier                             (backward / forward correction of a noisy binary verifier)
    vspo_clip.py     vspo_clip_provisional                       (VSPO: a smoothed group scale, clipped advantages)
    gigpo.py         gigpo                                       (multi-turn: episode + anchor-state step groups, [N, T])
    hgpo.py          hgpo                                        (multi-turn: groups by shared history depth, [N, T])
    salt.py          salt                                        (multi-turn: trajectory-graph step credit, [N, T])
    empg.py          empg                                        (multi-turn: entropy-modulated step advantages, [N, T])
    dr_mas.py        dr_mas                                      (multi-agent: per-agent GRPO over turns, [N, T])
    seeupo.py        seeupo                                      (multi-turn: mean-centred, batch-normalised outcome, [N, T])
    ui_s1.py         ui_s1                                       (semi-online: step scores + discounted returns, [N, T])
    selfplay.py      mars, self_redteam                          (self-play games: per-role returns and normalisation, [N, T])
    portool.py       portool_provisional                         (tool-call trees: step rewards, fork + trajectory advantages, [N, T])
    _steps.py        the step table of multi-turn episodes (Rollouts.turn / step_rewards / step_anchors)
    _groups.py       shared vectorised group statistics, input checks and metrics

Surrogates, aggregation, KL and importance corrections live in the sibling registries; sampling
(G+1 rollouts for MC-GRPO, rollout allocation for XRPO) lives in the rollout layer.
"""

from covey.algos.advantages.brpo import brpo
from covey.algos.advantages.confidence import ace, arm, xrpo
from covey.algos.advantages.difficulty import a_grae, dgpo, ngrpo
from covey.algos.advantages.disco import disco
from covey.algos.advantages.drpo import drpo
from covey.algos.advantages.egae import tppo
from covey.algos.advantages.dr_mas import dr_mas
from covey.algos.advantages.empg import empg
from covey.algos.advantages.entropy_control import aepo_entropy, dcpo
from covey.algos.advantages.gigpo import gigpo
from covey.algos.advantages.seeupo import seeupo
from covey.algos.advantages.ui_s1 import ui_s1
from covey.algos.advantages.grpo import dr_grpo, grpo, reinforce_pp_baseline, rloo
from covey.algos.advantages.hapo import hapo
from covey.algos.advantages.hgpo import hgpo
from covey.algos.advantages.identity import identity
from covey.algos.advantages.median import mc_grpo
from covey.algos.advantages.mssr import mssr
from covey.algos.advantages.multi_reward import gdpo
from covey.algos.advantages.noisy_verifier import noisy_verifier
from covey.algos.advantages.vspo_clip import vspo_clip_provisional
from covey.algos.advantages.oblr import oblr_baseline
from covey.algos.advantages.pairwise import dagrpo_provisional, trpa
from covey.algos.advantages.polychromic import polychromic
from covey.algos.advantages.portool import portool_provisional
from covey.algos.advantages.risk import riskpo
from covey.algos.advantages.selfplay import mars, self_redteam
from covey.algos.advantages.rover import rover
from covey.algos.advantages.salt import salt
from covey.algos.advantages.spo import spo
from covey.algos.advantages.spo_segment import spo_chain, spo_tree
from covey.algos.advantages.token_credit import gtpo
from covey.algos.advantages.tree import branch_grpo, treepo

__all__ = [
    "a_grae",
    "ace",
    "aepo_entropy",
    "arm",
    "branch_grpo",
    "brpo",
    "dagrpo_provisional",
    "dcpo",
    "dgpo",
    "disco",
    "dr_grpo",
    "dr_mas",
    "empg",
    "drpo",
    "gdpo",
    "gigpo",
    "grpo",
    "gtpo",
    "hapo",
    "hgpo",
    "identity",
    "mars",
    "mc_grpo",
    "mssr",
    "ngrpo",
    "noisy_verifier",
    "oblr_baseline",
    "polychromic",
    "portool_provisional",
    "reinforce_pp_baseline",
    "riskpo",
    "rloo",
    "rover",
    "salt",
    "seeupo",
    "self_redteam",
    "tppo",
    "vspo_clip_provisional",
    "treepo",
    "trpa",
    "ui_s1",
    "spo",
    "spo_chain",
    "spo_tree",
    "xrpo",
]
