"""Prompt samplers (the `PromptSampler` seam, registry `SAMPLERS`), group filters and per-prompt stats.

Importing this package registers the built-in samplers and the sampling-side rollout strategies that
live here (`dars`); see docs/sampling.md.
"""

from covey.data.base import SAMPLERS, BaseSampler, PromptSampler, register_sampler
from covey.data.filters import informative_groups
from covey.data.sampler import UniformSampler
from covey.data.spo import SPOSampler
from covey.data.vade import VadeSampler
from covey.data import dars  # noqa: F401  (registers the `dars` rollout strategy)
from covey.data import xrpo  # noqa: F401  (registers the `xrpo` sampler)
from covey.data import d3s  # noqa: F401  (registers `d3s`)
from covey.data import self_curation  # noqa: F401  (registers `self`)
from covey.data import masa  # noqa: F401  (registers `masa`)
from covey.data import drive  # noqa: F401  (registers `drive`)
from covey.data import gdro  # noqa: F401  (registers `gdro`)

__all__ = [
    "SAMPLERS",
    "BaseSampler",
    "PromptSampler",
    "SPOSampler",
    "UniformSampler",
    "VadeSampler",
    "informative_groups",
    "register_sampler",
]
