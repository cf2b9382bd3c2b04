"""Learner objectives other than the policy-gradient loss of the algorithm axes (`algo.objective`).

Each registers in `covey.learner.objective.OBJECTIVES` and is built as ``factory(cfg, policy, device,
**params)``; its `ObjectiveCaps.check_run(cfg)` refuses a run it cannot train when the config is read:

    direct_advantage.py   direct_advantage_provisional   offline step data + a separately trained critic
    hnpg.py               hnpg                           offline states and a critic mixed into on-policy updates
    critic.py             ValueCritic                    a value model (trunk + head) the objectives train or read
    step_data.py          the offline step data of direct_advantage (MC values, the critic, candidate steps)
"""

from covey.learner.objective import OBJECTIVES
from covey.objectives.critic import ValueCritic
from covey.objectives.direct_advantage import DirectAdvantage
from covey.objectives.hnpg import HNPG

__all__ = ["HNPG", "OBJECTIVES", "DirectAdvantage", "ValueCritic"]
