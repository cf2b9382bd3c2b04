"""Learner objectives other than the policy-gradient loss of the algorithm axes (`algo.objective`).

Each registers in `covey.learner.objective.OBJECTIVES` and is built as ``factory(cfg, policy, device,
**params)``; its `ObjectiveCaps.check_run(cfg)` refuses a run it cannot train when the config is read:

    direct_advantage.py   direct_advantage_provisional   offline step data + a separately trained critic
    hnpg.py               hnpg                           offline states and a critic mixed into on-policy updates
    essa.py               essa_provisional               CMA-ES over LoRA singular values (no gradient)
    cmaes.py              CMAES                          the (mu/mu_w, lambda) CMA-ES
    soft_grpo.py          soft_grpo                      the policy-gradient loss on soft-thinking rollouts
    ctrls.py              ctrls_provisional              a latent transition module trained by RL, the LM frozen
    critic.py             ValueCritic                    a value model (trunk + head) the objectives train or read
    step_data.py          the offline step data of direct_advantage (MC values, the critic, candidate steps)
"""

from covey.learner.objective import OBJECTIVES
from covey.objectives.critic import ValueCritic
from covey.objectives.ctrls import CTRLS
from covey.objectives.direct_advantage import DirectAdvantage
from covey.objectives.essa import ESSA
from covey.objectives.hnpg import HNPG
from covey.objectives.soft_grpo import SoftGRPO

__all__ = ["CTRLS", "ESSA", "HNPG", "OBJECTIVES", "DirectAdvantage", "SoftGRPO", "ValueCritic"]
