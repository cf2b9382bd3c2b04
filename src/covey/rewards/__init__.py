"""covey.rewards: reward functions, the reward runner, and the code sandbox.

A reward has TRL's signature ``fn(prompts, completions, **columns) -> list[float | None]`` (``async
def`` too); TRL's reward functions work unchanged, and so do its reward models (`ModelReward`). Built-in rewards are registered by name (`REWARDS`, `get_reward`);
user rewards are named by import path ``package.module:function``. `RewardRunner` scores a batch
with K rewards in worker processes (timeouts, failure fallbacks) into a ``rewards[N, K]`` matrix.
Math checking is `math.py`; model-written code runs in `covey.rewards.sandbox`; rewards that a model
judges (LLM-as-judge, tournaments) are `covey.rewards.judge`.
"""

from covey.rewards import bleu, code, decepchain, format, gui, item_value, length, majority, preference, ranking  # noqa: F401 - registers the rewards
from covey.rewards.judge import ArenaReward, JudgeReward  # registers judge and arenarl
from covey.rewards._scoring import FAILURE_KINDS, RewardOutput
from covey.rewards.bleu import BleuReward, bleu_score
from covey.rewards.code import CodeReward, extract_code
from covey.rewards.format import FormatReward
from covey.rewards.length import SoftOverlongPunishment, TargetLengthReward, completion_lengths
from covey.rewards.majority import MajorityVoteReward
from covey.rewards.model import ModelReward
from covey.rewards.math import (
    boxed_format_reward,
    completion_text,
    extract_answer,
    extract_boxed,
    math_accuracy_reward,
    math_equal,
    normalize_answer,
    parse_number,
)
from covey.rewards.registry import REWARDS, get_reward, register_reward
from covey.rewards.runner import RewardBatch, RewardCrashed, RewardFailure, RewardReturnError, RewardRunner, RewardSpec

register_reward("math")(math_accuracy_reward)
register_reward("boxed_format")(boxed_format_reward)

# rewards built on judges and groups (docs/rewards.md): the judge package registers judge, arenarl,
# writing_zero, fapo, fapo_genrm, medix and mpo; these register the set, entity, combinator and kernel rewards
from covey.rewards import combinators, entity, sets, table_latex, triton_exec, triton_gate  # noqa: E402, F401
# rewards of the vision-language seed recipes (docs/vlm.md): UI-R1's actions, multiple-choice VQA, temporal IoU
from covey.rewards import temporal, ui_r1, vqa  # noqa: E402, F401

__all__ = [
    "FAILURE_KINDS",
    "REWARDS",
    "ArenaReward",
    "BleuReward",
    "CodeReward",
    "FormatReward",
    "JudgeReward",
    "MajorityVoteReward",
    "ModelReward",
    "RewardBatch",
    "RewardCrashed",
    "RewardFailure",
    "RewardReturnError",
    "RewardOutput",
    "RewardRunner",
    "RewardSpec",
    "SoftOverlongPunishment",
    "TargetLengthReward",
    "bleu_score",
    "boxed_format_reward",
    "completion_lengths",
    "completion_text",
    "extract_answer",
    "extract_boxed",
    "extract_code",
    "get_reward",
    "math_accuracy_reward",
    "math_equal",
    "normalize_answer",
    "parse_number",
    "register_reward",
]
