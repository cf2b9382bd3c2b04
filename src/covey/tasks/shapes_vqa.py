"""Multiple-choice visual questions about a generated shape, Patho-R1-style (docs/vlm.md; Patho-R1,
arXiv 2505.11404): an offline stand-in for pathology VQA with the same prompt and answer format.

Each image is one filled shape (circle, square, triangle, diamond) in one of six colours; the question
asks for its shape or its colour, with four lettered options. The system prompt is Patho-R1's chain-of-
thought instruction with "pathology expert" left out ("... answer question step by step. Use the
following format:<think> Your step-by-step reasoning </think><answer> Your final answer </answer>",
Wenchuan-Zhang/Patho-R1 34948168047e README), the options follow the question one per line ("A. circle").
"""

from __future__ import annotations

import random

from covey.rewards.vqa import mcq_accuracy_provisional
from covey.tasks._common import check_counts, check_split, seeded_splits
from covey.tasks._draw import COLORS, draw_shape
from covey.tasks._images import ImageColumnKinds, place_images
from covey.tasks.registry import register_task

__all__ = ["ShapesVQA"]

SHAPES = ("circle", "square", "triangle", "diamond")
SYSTEM = ("You are an expert, your task is to answer question step by step. Use the following format:"
          "<think> Your step-by-step reasoning </think><answer> Your final answer </answer>")  # fmt: skip
LETTERS = "ABCD"


@register_task("shapes_vqa")
class ShapesVQA:
    """What shape, or what colour, is the figure? Four options, one right.

    Params: `size` (image side in pixels, a multiple of 28), `n_train` / `n_test`, `seed`.
    Item: ``{"id", "prompt", "image", "answer" (the letter), "options" ({letter: text}), "question" ("shape" or "color")}``.
    Verifier (column `accuracy`): `mcq_accuracy_provisional` (the option named in the last <answer> block).

    >>> item = ShapesVQA(n_train=0, n_test=1).examples("test")[0]
    >>> item["options"][item["answer"]] in ("circle", "square", "triangle", "diamond", *COLORS)
    True
    """

    name = "shapes_vqa"
    answer_format = "<think> ... </think><answer> the option letter </answer>"

    def __init__(self, *, size: int = 56, n_train: int = 256, n_test: int = 32, seed: int = 0):
        if size % 28 or not 28 <= size <= 448:
            raise ValueError(f"size must be a multiple of 28 in 28..448, got {size!r}")
        check_counts(n_train, n_test)
        self.size, self.n_train, self.n_test, self.seed = size, n_train, n_test, seed
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            self._cache = seeded_splits("shapes-vqa", self.seed, self.n_train, self.n_test, self._items)
        return self._cache[split]

    def reward(self, prompts, completions, answer, options, **_) -> list[float]:
        return mcq_accuracy_provisional(prompts, completions, answer, options)

    def demonstration(self, item: dict) -> str:
        letter = item["answer"]
        return f"<think>The figure's {item['question']} is {item['options'][letter]}.</think><answer>{letter}</answer>"

    def _items(self, count: int, rng: random.Random) -> list[dict]:
        items = []
        for i in range(count):
            shape, color = rng.choice(SHAPES), rng.choice(sorted(COLORS))
            question = rng.choice(("shape", "color"))
            right, pool = (shape, SHAPES) if question == "shape" else (color, tuple(sorted(COLORS)))
            choices = [right] + rng.sample([p for p in pool if p != right], 3)
            rng.shuffle(choices)
            options = dict(zip(LETTERS, choices))
            text = (f"What {question} is the figure in the image?\n" + "\n".join(f"{k}. {v}" for k, v in options.items()))
            item = {"id": i, "image": draw_shape(shape, COLORS[color], self.size), "answer": LETTERS[choices.index(right)],
                    "options": options, "question": question}  # fmt: skip
            prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
            item["prompt"] = place_images(prompt, item, f"shapes_vqa item {i}", None, ImageColumnKinds())
            items.append(item)
        return items
