"""Prompt sources, samplers and group filters."""

from covey.data.filters import informative_groups
from covey.data.sampler import UniformSampler

__all__ = ["UniformSampler", "informative_groups"]
