"""The identity advantage: A_i = r_i, for rewards that are already normalised within their group.

ArenaRL (arXiv 2601.06487; Alibaba-NLP/qqr 944a2e2 ``reward_models/arena/*.py``) returns group z-scores
as the reward and uses them as the advantage; a reward declaring ``prenormalized = True``
(`covey.rewards.group`) is meant for this estimator. `grpo` on top would z-score a z-score (the same
up to eps terms, but hiding the distinction); `dr_grpo` leaves z-scores unchanged too.
"""

from __future__ import annotations

from covey.algos.advantages._groups import groups_of, result, scalar_rewards
from covey.algos.registry import AdvantageResult, register_advantage
from covey.rollouts import Rollouts

__all__ = ["identity"]


@register_advantage(
    "identity",
    paper="ArenaRL: Scaling RL for Open-Ended Agents via Tournament-based Relative Ranking",
    arxiv="2601.06487",
)
def identity(batch: Rollouts) -> AdvantageResult:
    """A_i = r_i (the scalar reward, weighted sum of the reward columns). Shapes: r [N] -> A [N].

    No baseline and no scaling: use it only with a reward that is already centred and scaled per group
    (a `prenormalized` reward such as `arenarl`). NaN/inf rewards raise `RolloutsError`.
    """
    return result("identity", scalar_rewards(batch), batch, groups_of(batch))
