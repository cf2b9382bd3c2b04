"""Prompt samplers (the `BaseSampler` seam, registry `SAMPLERS`, config `sampler:`), group filters
and per-prompt stats. Importing this package registers the built-in samplers; see docs/sampling.md.
"""

from covey.samplers.base import SAMPLERS, BaseSampler, Draw, Feedback, register_sampler
from covey.samplers._sampling import apply_feedback
from covey.samplers.filters import informative_groups
from covey.samplers.sampler import UniformSampler
from covey.samplers.spo import SPOSampler
from covey.samplers.vade import VadeSampler
from covey.samplers import xrpo  # noqa: F401  (registers the `xrpo` sampler)
from covey.samplers import d3s  # noqa: F401  (registers `d3s`)
from covey.samplers import self_curation  # noqa: F401  (registers `self`)
from covey.samplers import masa  # noqa: F401  (registers `masa`)
from covey.samplers import drive  # noqa: F401  (registers `drive`)
from covey.samplers import gdro  # noqa: F401  (registers `gdro`)
from covey.samplers import vspo  # noqa: F401  (registers `vspo`)
from covey.samplers import v0  # noqa: F401  (registers `v0_provisional`)

__all__ = [
    "SAMPLERS",
    "BaseSampler",
    "Draw",
    "Feedback",
    "SPOSampler",
    "UniformSampler",
    "VadeSampler",
    "apply_feedback",
    "informative_groups",
    "register_sampler",
]
