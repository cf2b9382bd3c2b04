"""Temporal grounding on generated video frames, TempSamp-R1-style (docs/vlm.md; TempSamp-R1, arXiv
2509.18056): when, in seconds, is an event visible?

A "video" is `frames` frames at `fps` (timestamps 0, 1/fps, ...); a coloured square is visible in a run
of consecutive frames and the event spans from the first of them to one frame after the last. The
prompt is TempSamp-R1's (ZhangZikun6666/TempSamp-R1 55a92280a934 `data/timelens_grpo_train.jsonl`,
"To accurately pinpoint the event ... For example: <answer> 12.5 to 17.8 </answer>."), and the `answer`
column is its gold format ("<answer> 2.0 to 5.0 </answer>"), so `temporal_iou` scores it unchanged.
The frames reach the model as images with their times (`covey.tasks._images`, the `video` column).
"""

from __future__ import annotations

import random

from covey.rewards.temporal import parse_span, temporal_iou
from covey.rewards.math import completion_text
from covey.tasks._common import check_counts, check_split, seeded_splits
from covey.tasks._draw import COLORS
from covey.tasks._images import ImageColumnKinds, place_images
from covey.tasks.registry import register_task

__all__ = ["VideoGrounding"]

PROMPT = ('To accurately pinpoint the event "{event}" in the video, determine the precise time period of the event. '
          'Provide the start and end times (in seconds, precise to two decimal places) in the format "start time to end '
          'time" within <answer> </answer> tags. For example: <answer> 12.5 to 17.8 </answer>.')  # fmt: skip


def _frame(size: int, square: tuple[int, int, int] | None, pos: tuple[int, int]):
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (235, 235, 235))
    if square is not None:
        ImageDraw.Draw(img).rectangle((pos[0], pos[1], pos[0] + size // 3, pos[1] + size // 3), fill=square)
    return img


@register_task("video_grounding")
class VideoGrounding:
    """When is the coloured square visible?

    Params: `frames` (4-32), `fps`, `size` (frame side, a multiple of 28), `n_train` / `n_test`, `seed`.
    Item: ``{"id", "prompt", "video": {"frames", "timestamps"}, "answer" ("<answer> s to e </answer>"), "start", "end"}``.
    Verifier (column `accuracy`): 1.0 when the answered span's IoU with the gold is at least 0.5 (R@1 at
    IoU 0.5, the usual grounding accuracy); train on `temporal_iou`.

    >>> item = VideoGrounding(n_train=0, n_test=1).examples("test")[0]
    >>> len(item["video"]["frames"]), item["video"]["timestamps"][:3], item["answer"].startswith("<answer> ")
    (6, [0.0, 1.0, 2.0], True)
    """

    name = "video_grounding"
    answer_format = "<answer> start to end </answer> in seconds (TempSamp-R1's format)."

    def __init__(self, *, frames: int = 6, fps: float = 1.0, size: int = 56, n_train: int = 256, n_test: int = 32,
                 seed: int = 0):  # fmt: skip
        if not (isinstance(frames, int) and 4 <= frames <= 32):
            raise ValueError(f"frames must be an integer in 4..32, got {frames!r}")
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps!r}")
        if size % 28 or not 28 <= size <= 448:
            raise ValueError(f"size must be a multiple of 28 in 28..448, got {size!r}")
        check_counts(n_train, n_test)
        self.frames, self.fps, self.size, self.n_train, self.n_test, self.seed = frames, float(fps), size, n_train, n_test, seed
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            self._cache = seeded_splits("video-grounding", self.seed, self.n_train, self.n_test, self._items)
        return self._cache[split]

    def reward(self, prompts, completions, answer, **_) -> list[float]:
        out = []
        for c, gold in zip(completions, answer):
            pred, want = parse_span(completion_text(c)), parse_span(str(gold))
            out.append(1.0 if pred is not None and want is not None and temporal_iou(pred, want) >= 0.5 else 0.0)
        return out

    def demonstration(self, item: dict) -> str:
        return f"<answer> {item['start']:.2f} to {item['end']:.2f} </answer>"

    def _items(self, count: int, rng: random.Random) -> list[dict]:
        items = []
        for i in range(count):
            color = rng.choice(sorted(COLORS))
            first = rng.randrange(self.frames - 1)
            last = rng.randrange(first, self.frames)
            pos = (rng.randrange(self.size - self.size // 3), rng.randrange(self.size - self.size // 3))
            times = [k / self.fps for k in range(self.frames)]
            frames = [_frame(self.size, COLORS[color] if first <= k <= last else None, pos) for k in range(self.frames)]
            start, end = times[first], times[last] + 1.0 / self.fps
            item = {"id": i, "video": {"frames": frames, "timestamps": times}, "answer": f"<answer> {start:.1f} to {end:.1f} </answer>",
                    "start": start, "end": end}  # fmt: skip
            text = PROMPT.format(event=f"the {color} square is visible")
            item["prompt"] = place_images(text, item, f"video_grounding item {i}", None, ImageColumnKinds())
            items.append(item)
        return items
