"""Table image to LaTeX, Table2LaTeX-RL's task with its image input (docs/vlm.md; Table2LaTeX-RL, arXiv
2509.17589): a rendered table in, its LaTeX tabular out, scored by the paper's rewards (`table_teds`,
`table_render`; docs/rewards.md) against the `answer` column.

Tables are generated like examples/judge/table2latex's text version (models x metrics, booktabs rules,
half of them with a "Results" header spanning the metric columns over a two-row "Model" cell) and drawn
with PIL (`covey.tasks._draw.draw_table`). The prompt wording is covey's.
"""

from __future__ import annotations

import random

from covey.tasks._common import check_counts, check_split, seeded_splits
from covey.tasks._draw import draw_table
from covey.tasks._images import ImageColumnKinds, place_images
from covey.tasks.registry import register_task

__all__ = ["TableImages"]

MODELS = ("Base", "SFT", "RL", "Ours", "Large", "Small")
METRICS = ("Acc", "F1", "BLEU", "Time")
PROMPT = "Convert the table in the image into LaTeX: one tabular environment with booktabs rules. Reply with the tabular only."


def table(rng: random.Random) -> tuple[list[str], list[list[str]], bool, str]:
    """(header, rows, grouped, LaTeX) of one generated table."""
    cols = rng.sample(METRICS, rng.randint(2, 3))
    names = rng.sample(MODELS, rng.randint(2, 3))
    rows = [[m] + [f"{rng.uniform(10, 99):.1f}" for _ in cols] for m in names]
    group = rng.random() < 0.5
    lines = [rf"\begin{{tabular}}{{l{'c' * len(cols)}}}", r"\toprule"]
    if group:
        lines += [rf"\multirow{{2}}{{*}}{{Model}} & \multicolumn{{{len(cols)}}}{{c}}{{Results}} \\", " & " + " & ".join(cols) + r" \\"]
    else:
        lines.append("Model & " + " & ".join(cols) + r" \\")
    lines += [r"\midrule", *(" & ".join(r) + r" \\" for r in rows), r"\bottomrule", r"\end{tabular}"]
    return ["Model", *cols], rows, group, "\n".join(lines)


@register_task("table_images")
class TableImages:
    """Write the LaTeX of a rendered table. No verifier of its own: train with `table_teds` (and
    `table_render` where pdflatex runs), which read the reference in `answer`.

    Params: `n_train` / `n_test`, `seed`. Item: ``{"id", "prompt", "image", "answer" (the LaTeX)}``.

    >>> item = TableImages(n_train=0, n_test=1).examples("test")[0]
    >>> item["answer"].splitlines()[0].startswith(r"\\begin{tabular}{l"), item["image"].mode
    (True, 'RGB')
    """

    name = "table_images"
    answer_format = "A LaTeX tabular (booktabs rules), nothing else."

    def __init__(self, *, n_train: int = 128, n_test: int = 16, seed: int = 0):
        check_counts(n_train, n_test)
        self.n_train, self.n_test, self.seed = n_train, n_test, seed
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            self._cache = seeded_splits("table-images", self.seed, self.n_train, self.n_test, self._items)
        return self._cache[split]

    def demonstration(self, item: dict) -> str:
        return item["answer"]

    def _items(self, count: int, rng: random.Random) -> list[dict]:
        items = []
        for i in range(count):
            header, rows, group, latex = table(rng)
            item = {"id": i, "image": draw_table(header, rows, "Results" if group else None), "answer": latex}
            item["prompt"] = place_images(PROMPT, item, f"table_images item {i}", None, ImageColumnKinds())
            items.append(item)
        return items
