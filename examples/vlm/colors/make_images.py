"""Write the `colors` example: eight 56 x 56 PNGs (a coloured square, a coloured circle) and train.jsonl,
whose rows name them by relative path (TRL's `image` column).
    python examples/vlm/colors/make_images.py      # deterministic: same files every time
"""

import json
from pathlib import Path

from PIL import Image, ImageDraw

COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}


def main() -> None:
    here = Path(__file__).parent
    rows = []
    for name, rgb in COLORS.items():
        for shape in ("square", "circle"):
            img = Image.new("RGB", (56, 56), (255, 255, 255))
            draw = ImageDraw.Draw(img)
            (draw.rectangle if shape == "square" else draw.ellipse)((8, 8, 47, 47), fill=rgb)
            file = f"{name}_{shape}.png"
            img.save(here / file, optimize=True)
            rows.append({"prompt": [{"role": "user", "content": f"What colour is the {shape}? Answer in one word."}],
                         "image": file, "color": name})
    (here / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
