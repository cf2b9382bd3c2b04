"""Images and video frames in dataset rows (TRL's conventions), checked and placed into the prompt when
the data loads (docs/vlm.md, "Data").

A row may carry

    image    one image                       images   a list of images
    video    {"frames": [image, ...], "timestamps": [seconds, ...]}: frames with their times

where an image is a path (relative to the data file's folder, else to the working directory), bytes, a
PIL image, or a `datasets` Image value ({"bytes", "path"}). Chat messages may also hold
{"type": "image"} content parts: placeholders filled, in order, from the row's images (TRL's
`prepare_multimodal_messages`), or parts that carry their own {"image": ...}.

`place_images` checks every image of a row now (a missing file or one that does not decode is an
error naming the file and the row, before any model loads), refuses a column whose rows mix kinds of
image (a path in one row, bytes in another), and returns the prompt as chat messages whose image
parts hold the sources: images without placeholders go before the text of the first user message (a
string prompt becomes that user message); a video becomes, per frame, a text part
"Frame at {t:.2f}s:" and the frame. Covey's processor path renders video this way for every family
(transformers' video processors need torchvision); the reward columns keep what the row holds.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["IMAGE_COLUMNS", "ImageColumnKinds", "decode_datasets_images", "place_images"]

IMAGE_COLUMNS = ("image", "images", "video")


def _kind(source) -> str:
    from PIL import Image

    if isinstance(source, (str, os.PathLike)):
        return "a path"
    if isinstance(source, (bytes, bytearray)):
        return "bytes"
    if isinstance(source, Image.Image):
        return "a PIL image"
    if isinstance(source, dict) and ("bytes" in source or "path" in source):
        return "a datasets Image"
    return f"type {type(source).__name__}"


class ImageColumnKinds:
    """What kind of image each column held in the rows seen so far: a column must hold one kind."""

    def __init__(self):
        self.seen: dict[str, tuple[str, str]] = {}

    def check(self, column: str, source, where: str) -> None:
        kind = _kind(source)
        first = self.seen.setdefault(column, (kind, where))
        if first[0] != kind:
            raise ValueError(f"{where}: column {column!r} holds {kind} but {first[1]} holds {first[0]}: an image column "
                             "holds one kind of image (paths, bytes, PIL images or datasets Images)")  # fmt: skip


def _decoded(value):
    from PIL import Image

    if isinstance(value, dict) and "bytes" in value and "path" in value and len(value) == 2:
        return Image.open(io.BytesIO(value["bytes"])) if value.get("bytes") else value.get("path")
    return value


def decode_datasets_images(row: dict) -> dict:
    """The row with each `datasets` Image value ({"bytes", "path"}, what `Dataset.to_list` gives) in its
    image columns replaced by a lazily decoded PIL image, as indexing the dataset gives it (and TRL's
    reward functions receive it)."""
    out = dict(row)
    if isinstance(out.get("image"), dict):
        out["image"] = _decoded(out["image"])
    if isinstance(out.get("images"), (list, tuple)):
        out["images"] = [_decoded(v) for v in out["images"]]
    video = out.get("video")
    if isinstance(video, dict) and isinstance(video.get("frames"), (list, tuple)):
        out["video"] = {**video, "frames": [_decoded(v) for v in video["frames"]]}
    return out


def _source(source, base: Path | None):
    """A checked source kept for the prompt: an absolute path, or bytes / a PIL image as given (a
    datasets Image with bytes becomes a lazily decoded PIL image, as `datasets` gives it)."""
    from PIL import Image

    if isinstance(source, dict) and ("bytes" in source or "path" in source):
        source = Image.open(io.BytesIO(source["bytes"])) if source.get("bytes") else source.get("path")
    if isinstance(source, (str, os.PathLike)):
        p = Path(source).expanduser()
        if not p.is_absolute() and base is not None and ((base / p).exists() or not p.exists()):
            p = base / p  # the data file's folder first (and what a missing file is reported as)
        return str(p.resolve())
    return source


def _images_of(row: dict, where: str, kinds: ImageColumnKinds) -> tuple[list, list[float] | None]:
    """(image sources, frame timestamps or None) of a row's image columns."""
    images, times = [], None
    if row.get("image") is not None:
        kinds.check("image", row["image"], where)
        images.append(row["image"])
    if row.get("images") is not None:
        if not isinstance(row["images"], (list, tuple)):
            raise ValueError(f"{where}: column 'images' must be a list of images, got {type(row['images']).__name__}")
        for img in row["images"]:
            kinds.check("images", img, where)
        images += list(row["images"])
    if row.get("video") is not None:
        video = row["video"]
        if images:
            raise ValueError(f"{where}: a row holds a video or images, not both")
        if not isinstance(video, dict) or not isinstance(video.get("frames"), (list, tuple)) or not video["frames"]:
            raise ValueError(f"{where}: column 'video' must be {{'frames': [image, ...], 'timestamps': [seconds, ...]}}")
        times = video.get("timestamps")
        if not isinstance(times, (list, tuple)) or len(times) != len(video["frames"]):
            raise ValueError(f"{where}: video 'timestamps' must hold one time in seconds per frame ({len(video['frames'])})")
        if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) for t in times) or \
                any(b < a for a, b in zip(times, times[1:])):  # fmt: skip
            raise ValueError(f"{where}: video 'timestamps' must be finite seconds in non-decreasing order, got {list(times)[:8]}")
        for frame in video["frames"]:
            kinds.check("video", frame, where)
        images, times = list(video["frames"]), [float(t) for t in times]
    return images, times


def place_images(prompt, row: dict, where: str, base: Path | None, kinds: ImageColumnKinds):
    """The prompt with the row's images in it (module docstring); the prompt unchanged when the row has
    none. Every image is decoded once here to check it."""
    from covey.models.vision import load_image

    images, times = _images_of(row, where, kinds)
    msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    placeholders = sum(1 for m in msgs if not isinstance(m["content"], str) for p in m["content"]
                       if p.get("type") == "image" and p.get("image") is None)  # fmt: skip
    if not images and not placeholders:
        if any(not isinstance(m["content"], str) for m in msgs):
            for m in msgs:  # images carried by the parts themselves: checked like column images
                for i, p in enumerate(m["content"] if not isinstance(m["content"], str) else []):
                    if p.get("type") == "image":
                        m["content"] = list(m["content"])
                        m["content"][i] = {"type": "image", "image": _checked(p["image"], base, where, load_image)}
            return msgs
        return prompt
    sources = [_checked(img, base, where, load_image) for img in images]
    if times is not None:  # a video: its frames with their times, as text + image parts
        parts: list[dict] = []
        for t, src in zip(times, sources):
            parts += [{"type": "text", "text": f"Frame at {t:.2f}s:"}, {"type": "image", "image": src}]
        return _insert(msgs, parts, where)
    if placeholders:
        if placeholders != len(sources):
            raise ValueError(f"{where}: the prompt has {placeholders} image placeholder(s) but the row has {len(sources)} image(s)")
        it = iter(sources)
        for m in msgs:
            if not isinstance(m["content"], str):
                m["content"] = [{"type": "image", "image": next(it)} if p.get("type") == "image" and p.get("image") is None else p
                                for p in m["content"]]  # fmt: skip
        return msgs
    return _insert(msgs, [{"type": "image", "image": s} for s in sources], where)


def _checked(source, base: Path | None, where: str, load_image) -> Any:
    src = _source(source, base)
    load_image(src, where)  # ValueError naming the row and the file
    return src


def _insert(msgs: list[dict], parts: list[dict], where: str) -> list[dict]:
    """`parts` before the text of the first user message."""
    for m in msgs:
        if m["role"] == "user":
            text = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else list(m["content"])
            m["content"] = parts + text
            return msgs
    raise ValueError(f"{where}: a prompt with images needs a user message to hold them")
