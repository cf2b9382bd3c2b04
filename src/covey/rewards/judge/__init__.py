"""covey.rewards.judge: rewards that a model judges.

A judge is a backend (`backends.py`: local HF model through covey's engine, or an OpenAI-compatible
endpoint) x a template (`templates.py`) x a parser (`parsers.py`), with a reply cache (`cache.py`) and
parse retries (`core.py`). Rewards built on it: `judge` (pointwise, `reward.py`), `arenarl`
(group-wise tournaments, `arena.py`), `writing_zero` (pairwise GenRM against BRPO's reference,
`writing_zero.py`), `medix` (MediX-R1's composite, `medix.py`), `mpo` (a rubric judge a meta-judge refines, `mpo.py`)
and `fapo` (a GenRM penalising flawed correct answers, `fapo.py`). The runner audits judges against the task verifier (`audit.py`).
"""

from covey.rewards.judge.arena import TOPOLOGIES, ArenaReward
from covey.rewards.judge.backends import JudgeReply, JudgeRequest, LocalBackend, OpenAIBackend, build_backend
from covey.rewards.judge.cache import JudgeCache
from covey.rewards.judge.core import Judge
from covey.rewards.judge.fapo import FapoReward
from covey.rewards.judge.medix import MedixReward
from covey.rewards.judge.mpo import MpoReward
from covey.rewards.judge.parsers import PARSERS
from covey.rewards.judge.reward import JudgeReward
from covey.rewards.judge.templates import BUILTIN_TEMPLATES, get_template
from covey.rewards.judge.writing_zero import WritingZeroReward

__all__ = [
    "BUILTIN_TEMPLATES",
    "PARSERS",
    "TOPOLOGIES",
    "ArenaReward",
    "FapoReward",
    "Judge",
    "JudgeCache",
    "JudgeReply",
    "JudgeRequest",
    "JudgeReward",
    "LocalBackend",
    "MedixReward",
    "MpoReward",
    "OpenAIBackend",
    "WritingZeroReward",
    "build_backend",
    "get_template",
]
