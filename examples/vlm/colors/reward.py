"""The `colors` example's reward: 1.0 when the answer names the image's colour (column `color`), else 0.0.
A completion naming several colours scores 0.0, so listing them all does not pay."""

COLORS = ("red", "green", "blue", "yellow")


def names_the_color(prompts, completions, color, **_):
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    out = []
    for text, gold in zip(texts, color):
        said = {c for c in COLORS if c in text.lower()}
        out.append(1.0 if said == {gold} else 0.0)
    return out
