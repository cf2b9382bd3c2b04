"""UI-R1's GUI action prediction on generated screenshots (docs/vlm.md; UI-R1, arXiv 2503.21620).

An offline stand-in for UI-R1's ScreenSpot / AndroidControl data: a generated phone screen of labelled
buttons (`covey.tasks._draw`) and one instruction, whose answer is one of UI-R1's five actions. The
prompt is UI-R1's (lll6gg/UI-R1 2fe9bf00c8aa `grpo_json_action_coord.py`, `problem`), and the `solution`
column is built as UI-R1 builds it, so its rewards (`ui_r1_action`, `ui_r1_coord`, the `format` regex)
score it unchanged.
"""

from __future__ import annotations

import random

from covey.rewards.ui_r1 import ui_r1_coord
from covey.tasks._common import check_counts, check_split, seeded_splits
from covey.tasks._draw import draw_screen
from covey.tasks._images import ImageColumnKinds, place_images
from covey.tasks.registry import register_task

__all__ = ["GuiActions"]

ACTIONS = ("click", "open_app", "scroll", "navigate_back", "input_text")
BUTTONS = ("Save", "Cancel", "Share", "Search", "Menu", "Next", "Back", "Help", "Send", "Edit", "Play", "Mail")
APPS = ("Mail", "Camera", "Maps", "Notes", "Clock", "Music")
WORDS = ("hello", "pizza", "train", "weather")
PROBLEM = (
    "In this UI screenshot, I want to perform the command '{task}'.\n"
    "Please provide the action to perform (enumerate in ['click', 'open_app', 'scroll', 'navigate_back', 'input_text]')"
    "and the coordinate where the cursor is moved to(integer) if click is performed.\n"
    "Output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
    "The output answer format should be as follows:\n"
    "<think> ... </think> <answer>[{{'action': enum['click', 'open_app', 'scroll', 'navigate_back', 'input_text], "
    "'coordinate': [x, y]}}]</answer>\n"
    "Please strictly follow the format."
)


@register_task("gui_actions")
class GuiActions:
    """One action on a generated screen: click a named button (the answer's point must be inside its box),
    or open an app, scroll, go back, type text (the action alone counts).

    Params: `width` / `height` (the screenshot, multiples of 28 so a Qwen2-VL processor keeps its size and
    the model's coordinates are the screen's: UI-R1's `scales` are then (1, 1)), `buttons` per screen (2-8),
    `click_frac` (the share of click instructions; the rest split evenly), `n_train` / `n_test`, `seed`.
    Item: ``{"id", "prompt", "image", "action", "solution", "scales": [1.0, 1.0], "x1", "y1", "x2", "y2"}``
    (the box of the button to click; all four None for other actions).
    Verifier (column `accuracy`): UI-R1's coordinate reward: the action is right and, for a click, the
    point is inside the box.

    >>> item = GuiActions(n_train=0, n_test=1).examples("test")[0]
    >>> item["action"], item["solution"][:30], item["image"].size
    ('click', "<answer>[{'action': 'click' ,'", (112, 196))
    """

    name = "gui_actions"
    answer_format = "<think> ... </think> <answer>[{'action': 'click', 'coordinate': [x, y]}]</answer> (UI-R1's format)."

    def __init__(self, *, width: int = 112, height: int = 196, buttons: int = 4, click_frac: float = 0.6,
                 n_train: int = 256, n_test: int = 32, seed: int = 0):  # fmt: skip
        if width % 28 or height % 28 or not (56 <= width <= 1400 and 56 <= height <= 1400):
            raise ValueError(f"width and height must be multiples of 28 in 56..1400, got {width}x{height}")
        if not (isinstance(buttons, int) and 2 <= buttons <= 8):
            raise ValueError(f"buttons must be an integer in 2..8, got {buttons!r}")
        if buttons > (height - 16) // 24:
            raise ValueError(f"{buttons} buttons do not fit a {height}-pixel screen (one per 24-pixel row below the title)")
        if not 0.0 <= click_frac <= 1.0:
            raise ValueError(f"click_frac must be in [0, 1], got {click_frac!r}")
        check_counts(n_train, n_test)
        self.width, self.height, self.buttons, self.click_frac = width, height, buttons, click_frac
        self.n_train, self.n_test, self.seed = n_train, n_test, seed
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            self._cache = seeded_splits("gui-actions", self.seed, self.n_train, self.n_test, self._items)
        return self._cache[split]

    def reward(self, prompts, completions, solution, scales=None, **_) -> list[float]:
        return ui_r1_coord(prompts, completions, solution, scales)

    def demonstration(self, item: dict) -> str:
        """The centre of the box (a click) or the action, in UI-R1's answer format."""
        coord = [0, 0] if item["x1"] is None else [(item["x1"] + item["x2"]) // 2, (item["y1"] + item["y2"]) // 2]
        return f"<think>The command asks for {item['action']}.</think> <answer>[{{'action': '{item['action']}', 'coordinate': {coord}}}]</answer>"

    def _items(self, count: int, rng: random.Random) -> list[dict]:
        items = []
        for i in range(count):
            boxes = self._screen(rng)
            action = "click" if rng.random() < self.click_frac else rng.choice(ACTIONS[1:])
            target = rng.choice(sorted(boxes)) if action == "click" else None
            task = {"click": f"Click on the {target} button.", "open_app": f"Open the {rng.choice(APPS)} app.",
                    "scroll": "Scroll down to see more items.", "navigate_back": "Go back to the previous screen.",
                    "input_text": f"Type '{rng.choice(WORDS)}' in the text field."}[action]  # fmt: skip
            box = list(boxes[target]) if target else None
            solution = (f"<answer>[{{'action': 'click' ,'coordinate': {box} }}]</answer>" if box else
                        f"<answer>[{{'action': '{action}' ,'coordinate': [0,0,0,0]}}]</answer>")  # UI-R1's builder
            item = {"id": i, "image": draw_screen(self.width, self.height, boxes, title="App"), "action": action,
                    "solution": solution, "scales": [1.0, 1.0], "task": task,
                    **dict(zip(("x1", "y1", "x2", "y2"), box or [None] * 4))}  # fmt: skip
            prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROBLEM.format(task=task)}]}]
            item["prompt"] = place_images(prompt, item, f"gui_actions item {i}", None, ImageColumnKinds())
            items.append(item)
        return items

    def _screen(self, rng: random.Random) -> dict[str, tuple[int, int, int, int]]:
        """`buttons` labelled boxes in distinct rows of a grid below the title bar (never overlapping)."""
        rows = list(range((self.height - 16) // 24))
        names = rng.sample(BUTTONS, self.buttons)
        boxes = {}
        for name, r in zip(names, sorted(rng.sample(rows, self.buttons))):
            w = rng.randint(self.width // 3, self.width - 8)
            x1 = rng.randint(2, self.width - 2 - w)
            y1 = 16 + r * 24 + rng.randint(0, 4)
            boxes[name] = (x1, y1, x1 + w, y1 + 16)
        return boxes
