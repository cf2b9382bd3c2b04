"""Rollout strategies: how prompts become completions through an Engine."""

from covey.rollout.group import completion_texts, rollout_groups

__all__ = ["completion_texts", "rollout_groups"]
