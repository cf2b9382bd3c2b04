"""Drawing the generated images of the vision tasks (docs/vlm.md, "Seed recipes"): screens of labelled
elements, shapes, frames and tables, with PIL only. Images are made in memory when a task loads, from
its seed (nothing is downloaded or shipped); the same seed and Pillow version give the same pixels.
Text uses Pillow's bundled default font (with FreeType, a scalable one; else its bitmap font).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["COLORS", "draw_screen", "draw_shape", "draw_table", "font"]

COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30),
          "purple": (140, 60, 180), "orange": (240, 140, 30)}  # fmt: skip


@lru_cache(maxsize=8)
def font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size)
    except (TypeError, ValueError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def draw_screen(width: int, height: int, boxes: dict[str, tuple[int, int, int, int]], title: str | None = None):
    """A light UI screen: each named box a filled rounded rectangle with its name inside (clipped to it)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), (245, 245, 248))
    d = ImageDraw.Draw(img)
    if title:
        d.rectangle((0, 0, width - 1, 11), fill=(60, 70, 90))
        d.text((2, 1), title, fill=(255, 255, 255), font=font(9))
    for i, (name, (x1, y1, x2, y2)) in enumerate(boxes.items()):
        fill = [(200, 220, 250), (210, 240, 210), (250, 230, 200), (235, 215, 245)][i % 4]
        d.rectangle((x1, y1, x2, y2), fill=fill, outline=(90, 90, 110))
        label = Image.new("RGB", (max(1, x2 - x1 - 1), max(1, y2 - y1 - 1)), fill)
        ImageDraw.Draw(label).text((1, 0), name, fill=(20, 20, 30), font=font(max(6, min(10, y2 - y1 - 2))))
        img.paste(label, (x1 + 1, y1 + 1))
    return img


def draw_shape(shape: str, color: tuple[int, int, int], size: int = 56, margin: int = 8):
    """One filled shape (circle, square, triangle, diamond) on white."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)
    a, b = margin, size - 1 - margin
    if shape == "circle":
        d.ellipse((a, a, b, b), fill=color)
    elif shape == "square":
        d.rectangle((a, a, b, b), fill=color)
    elif shape == "triangle":
        d.polygon([(size // 2, a), (b, b), (a, b)], fill=color)
    elif shape == "diamond":
        d.polygon([(size // 2, a), (b, size // 2), (size // 2, b), (a, size // 2)], fill=color)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return img


def draw_table(header: list[str], rows: list[list[str]], group: str | None = None, cell: tuple[int, int] = (34, 14)):
    """A booktabs-looking table: rules above and below the header and at the end, no vertical lines;
    `group` is a header spanning every column but the first, above the column names (which then share
    the first column's two-row header cell)."""
    from PIL import Image, ImageDraw

    w, h = cell
    n_cols, lines = len(header), len(rows) + 1 + (group is not None)
    img = Image.new("RGB", (w * n_cols + 4, h * lines + 6), (255, 255, 255))
    d = ImageDraw.Draw(img)
    f = font(9)
    y = 2
    d.line((1, y, img.width - 2, y), fill=(0, 0, 0), width=1)
    if group is not None:
        d.text((2, y + h // 2 + 1), header[0], fill=(0, 0, 0), font=f)
        d.text((w + (w * (n_cols - 1)) // 2 - 3 * len(group), y + 1), group, fill=(0, 0, 0), font=f)
        y += h
        for j, name in enumerate(header[1:], 1):
            d.text((j * w + 2, y + 1), name, fill=(0, 0, 0), font=f)
    else:
        for j, name in enumerate(header):
            d.text((j * w + 2, y + 1), name, fill=(0, 0, 0), font=f)
    y += h
    d.line((1, y, img.width - 2, y), fill=(0, 0, 0), width=1)
    for row in rows:
        for j, text in enumerate(row):
            d.text((j * w + 2, y + 1), text, fill=(0, 0, 0), font=f)
        y += h
    d.line((1, y + 1, img.width - 2, y + 1), fill=(0, 0, 0), width=1)
    return img
