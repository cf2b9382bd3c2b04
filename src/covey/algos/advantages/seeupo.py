"""SeeUPO's advantage: GRAE without the group std, then normalised over the whole batch and clipped.
Paper: "SeeUPO: Sequence-Level Agentic-RL with Convergence Guarantees" (arXiv 2602.06554). Status CODE:
checked against modelscope/AgentEvolver e59dea4 (branch seeupo), `beyondagent/module/trainer/ba_ray_trainer.py`
(`compute_grpo_outcome_advantage_local` with ``norm_adv_by_std_in_grpo: false`` and ``special_norm: true``,
the settings of `launcher/qwen3_bfcl/qwen3-seeupo-bfcl.yaml`; `env_manager.to_dataproto_list`).

    x_i = R_i - mean_{g(i)} R                   R_i the episode's outcome; a one-episode group: mean 0
    A_i = clip((x_i - mean x) / std x, -3, 3)   over every episode of the batch (unbiased std); when
                                                std x <= 1e-6: x_i - mean x

The code builds one batch per turn, and every trajectory has a row in every turn's batch (turns after
its end are fully masked rows with the same reward), so the group and batch statistics see each episode
once whatever its length and the value is the same at every turn: covey computes it once per episode
(not per row: a per_step episode has one row per turn) and puts it on all of the episode's turns.
Single-turn rows (no `turn`) are episodes of one turn ([N] advantages). Not group-relative in covey's
sense: a one-episode group keeps its outcome (mean 0, the code's rule), which the batch normalisation spreads. The reverse-order, turn-by-turn updates with their importance ratios are `algo.turn_updates`
(`covey.algos.seeupo`); the `seeupo` preset sets both.
"""

from __future__ import annotations

import torch

from covey.algos.advantages._groups import F64, groups_of, result, scalar_rewards
from covey.algos.advantages._steps import step_table, to_tokens
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["seeupo"]


@register_advantage("seeupo", group_relative=False, paper="SeeUPO: Sequence-Level Agentic-RL with Convergence Guarantees (CODE)",
                    arxiv="2602.06554")  # fmt: skip
def seeupo(batch: Rollouts, *, norm_std: bool = False, batch_norm: bool = True, clip: float = 3.0,
           epsilon: float = 1e-6) -> AdvantageResult:  # fmt: skip
    """One value per episode on all its turns ([N, T]): group-mean-centred outcome (divided by the
    group's unbiased std + epsilon with `norm_std`), then batch-normalised and clipped at +-`clip`
    (`batch_norm`, the code's ``special_norm``; it needs norm_std false, as the code asserts)."""
    if batch_norm and norm_std:
        raise ValueError("seeupo: batch_norm needs norm_std false (the code asserts not norm_adv_by_std_in_grpo)")
    if clip <= 0:
        raise ValueError(f"seeupo: clip must be > 0, got {clip}")
    g = groups_of(batch)
    single = batch.turn is None  # single-turn rows: each row is an episode of one turn
    st = None if single else step_table(batch, "seeupo")
    score = scalar_rewards(batch) if single else torch.tensor(st.score, dtype=F64)
    groups = batch.group.tolist() if single else st.group
    x = torch.empty_like(score)
    for group in set(groups):
        idx = [j for j, gg in enumerate(groups) if gg == group]
        s = score[idx]
        mean, std = (s.mean(), s.std()) if len(idx) > 1 else (torch.zeros((), dtype=F64), torch.ones((), dtype=F64))
        x[idx] = (s - mean) / (std + epsilon) if norm_std else s - mean
    if batch_norm:
        spread = x.std() if len(x) > 1 else torch.zeros((), dtype=F64)
        x = ((x - x.mean()) / spread if spread > 1e-6 else x - x.mean()).clamp(-clip, clip)
    if single:
        return result("seeupo", x, batch, g, metrics={"episodes": float(len(x))})
    values = [[float(x[j])] * len(r) for j, r in enumerate(st.rewards)]
    return result("seeupo", to_tokens(batch, st, values), batch, g, metrics={"episodes": float(len(st.rows))})
