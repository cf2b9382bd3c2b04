"""`preference_label`: the label of an offline preference pair as a reward column.

The `offline_pairs` rollout strategy gives the chosen row of a pair the item column
``preferred=True`` and the rejected row ``False``; this reward turns it into 1.0 / 0.0, so the
`best_worst` pair builder pairs them. covey adds it by itself for `rollout.strategy: offline_pairs`.
"""

from __future__ import annotations

from covey.rewards.registry import register_reward

__all__ = ["preference_label"]


@register_reward("preference_label")
def preference_label(prompts, completions, preferred=None, **columns) -> list[float]:
    if preferred is None:
        raise ValueError("preference_label reads the `preferred` column that rollout.strategy offline_pairs writes")
    return [1.0 if p else 0.0 for p in preferred]
