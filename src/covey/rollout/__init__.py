"""Rollout strategies: how prompts become completions through an Engine."""

from covey.rollout.group import completion_texts, item_columns, rollout_groups

__all__ = ["completion_texts", "item_columns", "rollout_groups"]
