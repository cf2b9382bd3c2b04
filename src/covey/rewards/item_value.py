"""`step_advantage`: the advantage a row's offline step data gives it, as its reward column.

The `offline_steps` rollout strategy gives each row (a candidate next step of an offline state) the item
column ``advantage`` (the critic's A(s, a)); this reward reads it, so the run logs the data's
advantages like any reward. covey adds it by itself for `rollout.strategy: offline_steps`.

>>> step_advantage(prompts=["q", "q"], completions=["a", "b"], advantage=[0.25, -0.5])
[0.25, -0.5]
"""

from __future__ import annotations

from covey.rewards.registry import register_reward

__all__ = ["step_advantage"]


@register_reward("step_advantage")
def step_advantage(prompts, completions, advantage=None, **columns) -> list[float]:
    if advantage is None:
        raise ValueError("step_advantage reads the `advantage` column that rollout.strategy offline_steps writes")
    return [float(a) for a in advantage]
