"""GUI grounding on a text "screen": point at a named element, answering with candidate points.

A small, offline stand-in for the screenshot datasets of GUI-grounding RL (InfiGUI-G1, arXiv 2508.05731):
the screen is described as named elements with integer boxes, and the model answers in that recipe's
format, so the `aer_gui` reward trains on it unchanged. With `images: true` the screen is a generated
screenshot instead (the elements drawn as labelled boxes, `covey.tasks._draw`) and the prompt names only
the target: a vision-language policy's task (docs/vlm.md).
"""

from __future__ import annotations

import random

from covey.rewards.gui import check_boxes, first_point_in_box
from covey.tasks._common import as_prompt, check_counts, check_split, completion_text
from covey.tasks._draw import draw_screen
from covey.tasks._images import ImageColumnKinds, place_images
from covey.tasks.registry import register_task

__all__ = ["GuiPoints"]

NAMES = (
    "OK button", "Cancel button", "Save button", "search box", "menu icon", "back arrow", "settings gear",
    "close button", "title bar", "login link", "help icon", "next button", "share icon", "profile picture",
    "volume slider", "download button",
)
PROMPT = (
    "A screen of {width}x{height} pixels shows these elements, each as a box (x1, y1, x2, y2):\n{elements}\n"
    "Where is the {target}? {instruction}"
)
THINK = ("Think in <think> </think> tags, then answer with a JSON list of candidate points, best first, "
         'e.g. <think>...</think> [{"point_2d": [x, y]}].')
NO_THINK = 'Answer with a JSON list of candidate points, best first, e.g. [{"point_2d": [x, y]}].'
IMAGE_PROMPT = "This screenshot is {width}x{height} pixels. Where is the {target}? {instruction}"


@register_task("gui_points")
class GuiPoints:
    """Point at one named element of a generated screen.

    Each item describes `elements` non-overlapping named boxes with integer corners on a `width` x `height`
    grid and asks for one of them. Answer format (InfiGUI-G1's): ``<think>…</think>`` then a JSON list
    ``[{"point_2d": [x, y]}, …]`` of candidate points, best first (``no_think=True``: the list alone).
    Verifier: 1.0 when the answer is well formed (as the `aer_gui` reward reads it) and its first point is
    inside the target box, edges included; else 0.0. Train with the `aer_gui` reward, which reads the
    box columns x1, y1, x2, y2 and pays for the rank of the first hit among several candidates.

    >>> task = GuiPoints(n_train=0, n_test=1, chat=False)
    >>> item = task.examples("test")[0]
    >>> item["target"], (item["x1"], item["y1"], item["x2"], item["y2"])
    ('Cancel button', (53, 28, 76, 38))
    >>> task.reward([item["prompt"]] * 2, [task.demonstration(item), '<think>top</think>[{"point_2d": [0, 0]}]'],
    ...             **{k: [item[k]] * 2 for k in ("x1", "y1", "x2", "y2")})
    [1.0, 0.0]

    Params: `width`/`height` (grid, default 100 x 100), `elements` (boxes per screen, 2-8, default 4),
    `n_train`/`n_test`, `seed`, `no_think`, `chat`, `images` (a screenshot instead of the listing: needs
    `chat` and a width and height that are multiples of 28, Qwen2-VL's patch grid, so the model's pixel
    coordinates are the screen's; the item also gets an `image` column). Test is drawn first from its own seeded stream, train
    from another, skipping test's screens. Item: ``{"id", "prompt", "answer" (the box as "x1,y1,x2,y2"),
    "target", "elements" ({name: [x1, y1, x2, y2]}), "x1", "y1", "x2", "y2"}``.
    """

    name = "gui_points"
    answer_format = '<think>...</think> then a JSON list of candidate points, best first: [{"point_2d": [x, y]}, ...].'

    def __init__(self, *, width: int = 100, height: int = 100, elements: int = 4, n_train: int = 1000,
                 n_test: int = 100, seed: int = 0, no_think: bool = False, chat: bool = True, images: bool = False):
        if not (isinstance(width, int) and isinstance(height, int) and 20 <= width <= 10_000 and 20 <= height <= 10_000):
            raise ValueError(f"width and height must be integers in 20..10000, got {width!r}, {height!r}")
        if not (isinstance(elements, int) and 2 <= elements <= 8):
            raise ValueError(f"elements must be an integer in 2..8, got {elements!r}")
        check_counts(n_train, n_test)
        if not isinstance(no_think, bool):
            raise ValueError(f"no_think must be true or false, got {no_think!r}")
        if images and (not chat or width % 28 or height % 28):
            raise ValueError(f"images: true needs chat: true and width and height that are multiples of 28 (the patch grid), "
                             f"got chat={chat!r}, {width}x{height}")  # fmt: skip
        self.images = images
        self.width, self.height, self.elements = width, height, elements
        self.n_train, self.n_test, self.seed, self.no_think, self.chat = n_train, n_test, seed, no_think, chat
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            test = self._draw(self.n_test, random.Random(f"covey-gui-points-test-{self.seed}"), set())
            seen = {_key(s) for s in test}
            train = self._draw(self.n_train, random.Random(f"covey-gui-points-train-{self.seed}"), seen)
            self._cache = {"test": self._items(test), "train": self._items(train)}
        return self._cache[split]

    def demonstration(self, item: dict) -> str:
        """The centre of the target box as the one candidate, for a supervised warm start."""
        cx, cy = (item["x1"] + item["x2"]) // 2, (item["y1"] + item["y2"]) // 2
        answer = f'[{{"point_2d": [{cx}, {cy}]}}]'
        if self.no_think:
            return answer
        return (f"<think>The {item['target']} spans x {item['x1']}-{item['x2']} and y {item['y1']}-{item['y2']}; "
                f"its centre is ({cx}, {cy}).</think> {answer}")

    def reward(self, prompts, completions, x1, y1, x2, y2, **_) -> list[float | None]:
        check_boxes(x1, y1, x2, y2, len(completions))
        return [first_point_in_box(completion_text(c), *box, no_think=self.no_think)
                for c, *box in zip(completions, x1, y1, x2, y2)]

    # --- generation -------------------------------------------------------------------------

    def _items(self, screens) -> list[dict]:
        items = []
        for i, (boxes, target) in enumerate(screens):
            x1, y1, x2, y2 = boxes[target]
            listing = "\n".join(f"- {name}: ({a}, {b}, {c}, {d})" for name, (a, b, c, d) in boxes.items())
            instruction = NO_THINK if self.no_think else THINK
            text = PROMPT.format(width=self.width, height=self.height, elements=listing, target=target, instruction=instruction)
            item = {"id": i, "prompt": as_prompt(text, self.chat), "answer": f"{x1},{y1},{x2},{y2}",
                    "target": target, "elements": {k: list(v) for k, v in boxes.items()}, "x1": x1, "y1": y1, "x2": x2, "y2": y2}
            if self.images:
                item["image"] = draw_screen(self.width, self.height, boxes)
                text = IMAGE_PROMPT.format(width=self.width, height=self.height, target=target, instruction=instruction)
                item["prompt"] = place_images(as_prompt(text, True), item, f"gui_points item {i}", None, ImageColumnKinds())
            items.append(item)
        return items

    def _draw(self, count: int, rng: random.Random, exclude: set) -> list[tuple[dict, str]]:
        out: list[tuple[dict, str]] = []
        seen = set(exclude)
        for _ in range(50 * count + 100 if count else 0):
            boxes = self._screen(rng)
            if boxes is None:
                continue
            screen = (boxes, rng.choice(sorted(boxes)))
            if _key(screen) in seen:
                continue
            seen.add(_key(screen))
            out.append(screen)
            if len(out) == count:
                return out
        if count:
            raise ValueError(f"gui_points: found only {len(out)} distinct screens of {count} wanted; enlarge the grid")
        return out

    def _screen(self, rng: random.Random) -> dict[str, tuple[int, int, int, int]] | None:
        """`elements` named boxes that do not overlap (touching edges excluded too), or None if they did not fit."""
        boxes: dict[str, tuple[int, int, int, int]] = {}
        for name in rng.sample(NAMES, self.elements):
            for _ in range(100):
                w = rng.randint(max(2, self.width // 20), max(3, self.width // 4))
                h = rng.randint(max(2, self.height // 25), max(3, self.height // 8))
                x1, y1 = rng.randint(0, self.width - 1 - w), rng.randint(0, self.height - 1 - h)
                box = (x1, y1, x1 + w, y1 + h)
                if all(box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1] for b in boxes.values()):
                    boxes[name] = box
                    break
            else:
                return None
        return boxes


def _key(screen) -> tuple:
    boxes, target = screen
    return tuple(sorted(boxes.items())), target
