"""`gui_sim`: a text GUI simulator that replays expert trajectories semi-online (UI-S1, arXiv 2509.11543).

UI-S1 trains on static expert trajectories as if online: the agent acts on its own history; when its
action matches the expert's, the next screen is the trajectory's next one; when it does not, a patch
module puts the expert's action in the history instead and the episode goes on, at most
`patch_threshold` times (then it ends). Checked against X-PLUG/MobileAgent f7702e4
(`UI-S1/verl/utils/dataset/universal_multiround.py`: `MultiRoundGenerator.apply_response` with
``patch_threshold`` (-1: no limit), `UI-S1/verl/utils/reward_score/gui_traj.py`: the step score;
`UI-S1/scripts/train_example.sh`: patch_threshold 2). The screens here are text (the VLM issue brings
screenshots); the tasks are covey's (`covey.tasks.gui_sim`).

A turn is ``<think>why</think><action>click(Settings)</action>`` (actions: click(element),
type(text), scroll(up|down), open_app(name), back(), done()). Its step reward is UI-S1's score:

    0.1 * format + 0.9 * action        format: a non-empty <think>; action: 1.0 the expert's action
                                       (type and argument, case and spaces ignored), 0.5 the right type
                                       only, 0.1 a parsed action of another type, 0.0 no action parsed

The turn is valid (``info["valid"]``, UI-S1's ``extract_match``) only when the action is the expert's;
an invalid turn is patched: ``info["replace_action"]`` is the expert's turn (its thought and action),
which the `episodes` strategy keeps in the conversation instead of the model's (layout per_step). The
episode ends (terminated) after the last expert step, or at the patch past `patch_threshold`;
success = every step matched. The anchor is the step index.
"""

from __future__ import annotations

import copy
import re

from covey.envs.base import Action, StepResult, register_env

__all__ = ["ACTIONS", "GuiSimEnv", "action_text", "parse_action", "step_score"]

ACTIONS = ("click", "type", "scroll", "open_app", "back", "done")
SYSTEM = ("You operate a phone through its screen, described as text. Each turn, think in <think> </think>, then give "
          "one action in <action> </action>: click(element), type(text), scroll(up) or scroll(down), open_app(name), "
          "back() or done(). Example: <think>The Settings app has the Wi-Fi switch.</think><action>open_app(Settings)"
          "</action>")  # fmt: skip
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_CALL = re.compile(r"^\s*([a-z_]+)\s*\((.*)\)\s*$", re.DOTALL)


def _norm(s: str) -> str:
    return " ".join(s.strip().strip("'\"").lower().split())


def parse_action(text: str) -> tuple[str, str] | None:
    """(type, argument) of the last <action>...</action> of a turn, or None when there is none to parse.

    >>> parse_action("<think>x</think><action>click( Wi-Fi )</action>"), parse_action("click(Wi-Fi)")
    (('click', 'wi-fi'), None)
    """
    tags = _ACTION_TAG.findall(text)
    m = _CALL.match(tags[-1]) if tags else None
    if m is None or m.group(1) not in ACTIONS:
        return None
    return m.group(1), _norm(m.group(2))


def action_text(step: dict) -> str:
    """The expert's turn as a model would write it (what a patch puts in the history)."""
    return f"<think>{step['thought']}</think><action>{step['action']}({step.get('arg', '')})</action>"


def step_score(text: str, step: dict) -> tuple[float, bool]:
    """(UI-S1's step score, whether the action is the expert's) of one turn against one expert step.

    >>> step = {"action": "click", "arg": "Wi-Fi", "thought": "t"}
    >>> step_score("<think>t</think><action>click(wi-fi)</action>", step), step_score("<action>click(Bluetooth)</action>", step)
    ((1.0, True), (0.45, False))
    """
    thought = _THINK.findall(text)
    fmt = 1.0 if thought and thought[-1].strip() else 0.0
    parsed = parse_action(text)
    if parsed is None:
        return 0.1 * fmt, False
    kind, arg = parsed
    exact = kind == step["action"] and arg == _norm(str(step.get("arg", "")))
    action = 1.0 if exact else (0.5 if kind == step["action"] else 0.1)
    return round(0.1 * fmt + 0.9 * action, 10), exact


@register_env("gui_sim")
class GuiSimEnv:
    """Semi-online replay of the item's expert trajectory (module docstring). patch_threshold: how many
    mismatched turns are patched before the episode ends (-1: no limit; UI-S1's script: 2)."""

    tools = None

    def __init__(self, *, patch_threshold: int = 2, system_prompt: str = SYSTEM):
        if patch_threshold < -1:
            raise ValueError(f"gui_sim: patch_threshold must be >= -1 (-1: patch every mismatch), got {patch_threshold}")
        self.patch_threshold, self.system_prompt = patch_threshold, system_prompt
        self.steps: list[dict] = []
        self.t = self.patches = 0

    def reset(self, item: dict, *, seed: int) -> StepResult:
        steps = item.get("steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) and "screen" in s and "action" in s for s in steps):
            raise ValueError("gui_sim needs items with 'steps': a non-empty list of {screen, action, arg, thought}")
        self.steps, self.t, self.patches = steps, 0, 0
        task = item["prompt"] if isinstance(item["prompt"], str) else item["prompt"][-1]["content"]
        return StepResult([{"role": "system", "content": self.system_prompt},
                           {"role": "user", "content": f"Task: {task}\n\nScreen:\n{steps[0]['screen']}"}], anchor=0)  # fmt: skip

    def step(self, action: Action) -> StepResult:
        expert = self.steps[self.t]
        score, matched = step_score(action.text, expert)
        info = {"valid": matched, "match": matched}
        if not matched:
            if self.patch_threshold != -1 and self.patches >= self.patch_threshold:
                return StepResult([], score, terminated=True, anchor=self.t, info={**info, "success": False})
            self.patches += 1
            info["replace_action"] = action_text(expert)
        self.t += 1
        if self.t == len(self.steps):
            return StepResult([], score, terminated=True, anchor=self.t, info={**info, "success": self.patches == 0})
        return StepResult([{"role": "user", "content": f"Screen:\n{self.steps[self.t]['screen']}"}], score, anchor=self.t, info=info)

    def fork(self) -> GuiSimEnv:
        return copy.copy(self)

    def close(self) -> None:
        pass
