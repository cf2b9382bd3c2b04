"""Prompt samplers (the `PromptSampler` seam, registry `SAMPLERS`) and group filters."""

from covey.data.base import SAMPLERS, BaseSampler, PromptSampler, register_sampler
from covey.data.filters import informative_groups
from covey.data.sampler import UniformSampler

__all__ = ["SAMPLERS", "BaseSampler", "PromptSampler", "UniformSampler", "informative_groups", "register_sampler"]
