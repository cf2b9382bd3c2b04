"""The `gui_sim` task: expert trajectories on a text phone (settings switches, notes, alarms, calls) for the
semi-online `gui_sim` environment (`covey.envs.gui_sim`, UI-S1). Procedurally generated and seeded: each
item is an instruction and the expert's steps, each step the screen it acts on, the expert's action and
a one-line thought. The verifier scores a single-turn answer against the first step (UI-S1's step
score), so the task also works without the environment."""

from __future__ import annotations

import random

from covey.envs.gui_sim import action_text, step_score
from covey.tasks._common import check_split
from covey.tasks.registry import register_task

__all__ = ["GuiSimTask", "make_trajectory"]

APPS = ("Settings", "Notes", "Clock", "Phone", "Camera", "Maps", "Music", "Mail")
FEATURES = ("Wi-Fi", "Bluetooth", "Airplane mode", "Dark mode", "Location")
WORDS = ("milk", "eggs", "call mom", "pay rent", "gym at six", "buy flowers", "water plants", "dentist friday")
NAMES = ("Ada", "Bram", "Chen", "Dara", "Eli", "Fern", "Gus", "Hana", "Ivo", "Juno")


def _screen(title: str, elements: list[str]) -> str:
    return f"App: {title}\n" + "\n".join(f"- {e}" for e in elements)


def _home(rng: random.Random) -> str:
    apps = list(APPS)
    rng.shuffle(apps)
    return _screen("Home", [f"app {a}" for a in apps])


def make_trajectory(rng: random.Random) -> tuple[str, list[dict]]:
    """(instruction, expert steps) of one random task."""
    kind = rng.choice(("switch", "note", "alarm", "call"))
    step = lambda screen, action, arg, thought: {"screen": screen, "action": action, "arg": arg, "thought": thought}  # noqa: E731
    if kind == "switch":
        feature = rng.choice(FEATURES)
        others = [f for f in FEATURES if f != feature]
        rng.shuffle(others)
        items = others[:3] + [feature]
        rng.shuffle(items)
        return f"Turn on {feature}.", [
            step(_home(rng), "open_app", "Settings", f"{feature} is in Settings."),
            step(_screen("Settings", items), "click", feature, f"Open the {feature} page."),
            step(_screen(feature, [f"switch {feature}: off", "button Back"]), "click", f"switch {feature}",
                 "Flip the switch on."),  # fmt: skip
            step(_screen(feature, [f"switch {feature}: on", "button Back"]), "done", "", "It is on now."),
        ]
    if kind == "note":
        text = rng.choice(WORDS)
        return f"Write a note saying '{text}'.", [
            step(_home(rng), "open_app", "Notes", "Notes are written in the Notes app."),
            step(_screen("Notes", ["button New note", "note shopping", "note ideas"]), "click", "New note", "Start a new note."),
            step(_screen("New note", ["field Text (empty)", "button Save"]), "type", text, "Type the text."),
            step(_screen("New note", [f"field Text: {text}", "button Save"]), "click", "Save", "Save it."),
            step(_screen("Notes", [f"note {text}", "note shopping", "note ideas"]), "done", "", "The note is saved."),
        ]
    if kind == "alarm":
        hour, minute = rng.randint(5, 11), rng.choice(("00", "15", "30", "45"))
        time = f"{hour}:{minute}"
        return f"Set an alarm for {time}.", [
            step(_home(rng), "open_app", "Clock", "Alarms are in the Clock app."),
            step(_screen("Clock", ["tab Alarm", "tab Timer", "tab Stopwatch"]), "click", "Alarm", "Go to the alarms."),
            step(_screen("Alarm", ["button Add alarm", "alarm 6:30 off"]), "click", "Add alarm", "Add a new alarm."),
            step(_screen("New alarm", ["field Time (empty)", "button Save"]), "type", time, "Enter the time."),
            step(_screen("New alarm", [f"field Time: {time}", "button Save"]), "click", "Save", "Save the alarm."),
            step(_screen("Alarm", [f"alarm {time} on", "alarm 6:30 off"]), "done", "", "The alarm is set."),
        ]
    name = rng.choice(NAMES)
    others = [n for n in NAMES if n != name]
    rng.shuffle(others)
    top, rest = others[:3], others[3:5]
    return f"Call {name}.", [
        step(_home(rng), "open_app", "Phone", "Calls are made in the Phone app."),
        step(_screen("Phone", ["tab Keypad", "tab Contacts", "tab Recents"]), "click", "Contacts", "Find the contact."),
        step(_screen("Contacts", [f"contact {n}" for n in top] + ["(more below)"]), "scroll", "down", f"{name} is further down."),
        step(_screen("Contacts", [f"contact {n}" for n in [*rest, name]]), "click", name, f"Open {name}."),
        step(_screen(name, ["button Call", "button Message"]), "click", "Call", "Call."),
        step(_screen("Calling", [f"calling {name}", "button End"]), "done", "", "The call is placed."),
    ]


@register_task("gui_sim")
class GuiSimTask:
    """Expert trajectories ``{"id", "prompt", "steps"}`` for the `gui_sim` env (module docstring); train
    and test come from separate seeded streams. Params: n_train, n_test, seed."""

    name = "gui_sim"
    answer_format = "<think>why</think><action>click(element)</action> (or type, scroll, open_app, back, done)"

    def __init__(self, *, n_train: int = 64, n_test: int = 16, seed: int = 0):
        if n_train < 1 or n_test < 0:
            raise ValueError(f"gui_sim: need n_train >= 1 and n_test >= 0 (got {n_train}, {n_test})")
        self.n, self.seed = {"train": n_train, "test": n_test}, seed

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        rng = random.Random((self.seed * 2 + (split == "test")) * 1_000_003)
        out = []
        for i in range(self.n[split]):
            instruction, steps = make_trajectory(rng)
            out.append({"id": i, "prompt": instruction, "steps": steps})
        return out

    def demonstration(self, item: dict) -> str:
        """The expert's first turn (for `covey sft`)."""
        return action_text(item["steps"][0])

    def reward(self, prompts, completions, steps, **_) -> list[float]:
        """UI-S1's step score of a single answer against the first expert step."""
        return [step_score(c if isinstance(c, str) else c[-1]["content"], s[0])[0] for c, s in zip(completions, steps)]
