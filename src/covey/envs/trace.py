"""`trace_provisional`: TRACE's capability-targeted environments (arXiv 2604.05336, "TRACE: Capability-Targeted
Agentic Training"), reconstructed and PARTIAL. The authors' code (ScalingIntelligence/TRACE) could not be read
here (no snapshot); the pipeline follows the abstract and the project page:

    1. contrast successful and failed trajectories of the base agent, name the capabilities it lacks
       (`contrast`: a model reads both kinds of transcripts and answers JSON)
    2. synthesise an environment that rewards exercising each capability (`TraceCapabilityEnv`)
    3. train one LoRA adapter per capability with GRPO (one `covey train` per capability with
       ``model.lora``: `scripts/trace_capabilities.py` writes the configs)
    4. route each task to the relevant adapter at inference            NOT BUILT: no router picks a
       capability for a task, and `covey eval` evaluates one model (one exported adapter) per run, so
       nothing loads the matching adapter item by item; each adapter is evaluated on its own instead
    (also not built: new task instances per capability; the base task's items are reused)

TRACE synthesises a new environment program per capability; covey keeps the base environment (its tools,
tasks and observations: "tool-schema preserving") and adds a verifiable check of the capability from a
fixed vocabulary (`CHECKS`), so a model's analysis never becomes code that runs. The episode's final step
gets ``capability_weight`` when the check holds, plus ``base_weight`` times the base env's own reward.

Checks (over the episode's turns: the tools each turn called, its tool errors, whether it ended the episode):
    tool_before_answer {tool}   a turn before the final answer called `tool` without a tool error
    no_tool_errors              at least one tool call, and no tool error in the episode
    answer_tag                  the final answer holds <answer>...</answer>
    within_turns {turns}        the episode ended (terminated) within `turns` turns
    answered                    the episode ended with a final answer (not cut by a limit)
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from covey.envs.base import ENVS, Action, StepResult, fork_env, register_env
from covey.envs.llm import json_block

__all__ = ["CHECKS", "TraceCapabilityEnv", "check_capability", "contrast", "exercised"]

_TAG = re.compile(r"<answer>.*?</answer>", re.DOTALL)


def _final(turns: list[dict]) -> dict | None:
    return turns[-1] if turns and turns[-1]["final"] else None


CHECKS = {
    "tool_before_answer": lambda turns, p: _final(turns) is not None and any(
        p["tool"] in t["tools"] and t["tool_errors"] == 0 for t in turns[:-1]),
    "no_tool_errors": lambda turns, p: any(t["tools"] for t in turns) and all(t["tool_errors"] == 0 for t in turns),
    "answer_tag": lambda turns, p: _final(turns) is not None and bool(_TAG.search(turns[-1]["text"])),
    "within_turns": lambda turns, p: _final(turns) is not None and len(turns) <= p["turns"],
    "answered": lambda turns, p: _final(turns) is not None,
}  # fmt: skip
_PARAMS = {"tool_before_answer": {"tool": str}, "within_turns": {"turns": int}}


def check_capability(cap) -> str | None:
    """Why a capability spec ``{"name", "description", "check": {"kind", ...params}}`` is refused, or None."""
    if not isinstance(cap, dict) or not isinstance(cap.get("name"), str) or not cap["name"].strip():
        return "a capability needs a name"
    check = cap.get("check")
    if not isinstance(check, dict) or check.get("kind") not in CHECKS:
        return f"a capability's check must be one of {', '.join(CHECKS)}"
    want = _PARAMS.get(check["kind"], {})
    extra = set(check) - {"kind"} - set(want)
    if extra:
        return f"check {check['kind']!r} takes {sorted(want) or 'no parameters'}, got {sorted(extra)}"
    for key, kind in want.items():
        if not isinstance(check.get(key), kind) or isinstance(check.get(key), bool):
            return f"check {check['kind']!r} needs {key!r} ({kind.__name__})"
    if check["kind"] == "within_turns" and check["turns"] < 1:
        return "within_turns needs turns >= 1"
    return None


def exercised(turns: list[dict], check: dict) -> bool:
    """Whether an episode's turns satisfy a capability check."""
    return bool(CHECKS[check["kind"]](turns, check))


@register_env("trace_provisional")
class TraceCapabilityEnv:
    """A base env whose episodes also earn a reward for exercising one capability (module docstring).
    base: the base env ({name, ...params}); capability: {name, description, check}; capability_weight,
    base_weight: the final step's reward = base_weight * base reward + capability_weight * [check holds]."""

    def __init__(self, *, base: dict, capability: dict, capability_weight: float = 1.0, base_weight: float = 0.0):
        if not isinstance(base, dict) or not isinstance(base.get("name"), str) or base["name"] == "trace_provisional":
            raise ValueError("trace_provisional: base must be another env, {name: ..., ...params}")
        why = check_capability(capability)
        if why is not None:
            raise ValueError(f"trace_provisional: {why}")
        if capability_weight < 0 or base_weight < 0:
            raise ValueError("trace_provisional: capability_weight and base_weight must be >= 0")
        self.env = ENVS.build(base["name"], {k: v for k, v in base.items() if k != "name"})
        self.tools = getattr(self.env, "tools", None)
        self.capability, self.weights = capability, (float(capability_weight), float(base_weight))
        self.turns: list[dict] = []

    def reset(self, item: dict, *, seed: int) -> StepResult:
        self.turns = []
        return self.env.reset(item, seed=seed)

    def step(self, action: Action) -> StepResult:
        res = self.env.step(action)
        self.turns.append({"text": action.text, "tools": [c.name for c in action.tool_calls if c.error is None],
                           "tool_errors": int(res.info.get("tool_errors", 0)), "final": res.terminated and not action.tool_calls})  # fmt: skip
        reward = self.weights[1] * res.reward
        info = dict(res.info)
        if res.done:
            hit = exercised(self.turns, self.capability["check"])
            reward += self.weights[0] * hit
            info["capability"] = hit
        return StepResult(res.messages, reward, res.terminated, res.truncated, res.anchor, info)

    def fork(self) -> TraceCapabilityEnv:
        twin = copy.copy(self)
        twin.env, twin.turns = fork_env(self.env), copy.deepcopy(self.turns)
        return twin

    def close(self) -> None:
        self.env.close()


CONTRAST = ("Below are an agent's successful and failed attempts at tasks in one environment. Compare them and name at "
            "most {n} capabilities the failed attempts lack: actions the successful ones perform that the tasks need. "
            "For each give a check from this list (nothing else can be checked): {checks}. Answer with a JSON list of "
            "{{\"name\": ..., \"description\": ..., \"check\": {{\"kind\": ..., ...}}}} inside ```json ... ```.\n\n"
            "Successful attempts:\n{good}\n\nFailed attempts:\n{bad}")  # fmt: skip
_CHECK_LIST = ('tool_before_answer {"tool": name}; no_tool_errors; answer_tag; within_turns {"turns": k}; answered')


def contrast(asker, episodes: list[dict], max_capabilities: int = 3, per_side: int = 4, seed: int = 0) -> tuple[list[dict], dict[str, int]]:
    """TRACE's step 1: the capabilities failed episodes lack, named by a model from `per_side` successful and
    failed transcripts (`episodes`: ``{"transcript": [messages], "success": bool}``); only capabilities with a
    valid check are kept (at most `max_capabilities`, first names first). Returns (capabilities, counts)."""
    def show(eps):
        return "\n\n".join(json.dumps(e["transcript"], ensure_ascii=False)[:2000] for e in eps[:per_side]) or "(none)"

    good = [e for e in episodes if e["success"]]
    bad = [e for e in episodes if not e["success"]]
    counts = {"proposed": 0, "kept": 0, "refused": 0}
    if not good or not bad:  # nothing to contrast
        return [], counts
    (reply,) = asker.ask([[{"role": "user", "content": CONTRAST.format(n=max_capabilities, checks=_CHECK_LIST, good=show(good),
                                                                     bad=show(bad))}]], seed)  # fmt: skip
    proposed = json_block(reply)
    caps: list[dict[str, Any]] = []
    for cap in proposed if isinstance(proposed, list) else []:
        counts["proposed"] += 1
        if check_capability(cap) is None and cap["name"] not in {c["name"] for c in caps} and len(caps) < max_capabilities:
            caps.append({"name": cap["name"].strip(), "description": str(cap.get("description", "")), "check": cap["check"]})
        else:
            counts["refused"] += 1
    counts["kept"] = len(caps)
    return caps, counts
