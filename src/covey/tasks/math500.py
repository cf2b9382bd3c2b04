"""MATH-500 competition problems (test split only), scored with `math_equal` (math-verify).

Loading, prompt building and the verifier; the data file (MIT, with its provenance) ships in
``covey/tasks/data/math500`` (see its README).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from covey.tasks._common import FinalAnswerTask, as_prompt, check_dataset_params, check_split
from covey.tasks._data import check_fields, data_file, hub_rows, is_hub, read_jsonl
from covey.tasks.registry import register_task

__all__ = ["MATH500"]

DEFAULT_TEMPLATE = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


@register_task("math500")
class MATH500(FinalAnswerTask):
    r"""MATH-500: the 500-problem test subset of MATH (Hendrycks et al. 2021, "Measuring Mathematical
    Problem Solving With the MATH Dataset", arXiv 2103.03874) chosen in "Let's Verify Step by Step"
    (Lightman et al. 2023, arXiv 2305.20050).

    Answer format: the prompt asks for ``\boxed{...}``; the verifier takes the last ``\boxed{}``
    (else "answer is x"; `order` changes this) and compares it to the gold LaTeX answer with
    `math_equal` (numeric fast path, then math-verify: ``\frac{\sqrt{2}}{2}`` = ``1/\sqrt{2}``).
    Reward 1.0 / 0.0.

    >>> task = MATH500(limit=1, chat=False)
    >>> item = task.examples("test")[0]
    >>> item["answer"]
    '\\left( 3, \\frac{\\pi}{2} \\right)'
    >>> task.reward([item["prompt"]] * 2, [r"so \boxed{(3, \pi/2)}", r"\boxed{(3, \pi)}"], answer=[item["answer"]] * 2)
    [1.0, 0.0]

    Data: ``math500/test.jsonl[.gz]`` (500 rows; there is no train split) under `path` (a folder or
    the file), else $COVEY_DATA, else the copy shipped with covey; ``path="hub"`` loads
    ``HuggingFaceH4/MATH-500`` with `datasets` instead. Params: `limit`, `chat`,
    `template` (with ``{problem}``), `order`, `path`. Item: ``{"id" (line index), "prompt",
    "answer", "subject", "level", "unique_id"}``.
    """

    name = "math500"
    answer_format = "The final answer in \\boxed{}, e.g. '\\boxed{\\frac{1}{2}}' (the last box counts)."

    def __init__(
        self,
        *,
        path: str | os.PathLike | None = None,
        limit: int | None = None,
        chat: bool = True,
        template: str = DEFAULT_TEMPLATE,
        order: Sequence[str] = ("boxed", "answer_is"),
    ):
        check_dataset_params(template, "problem", limit, order)
        self.path, self.limit, self.chat, self.template, self.order = path, limit, chat, template, tuple(order)
        self._items: list[dict] | None = None

    def examples(self, split: str = "test") -> list[dict]:
        check_split(self.name, split, allowed=("test",))
        if self._items is None:
            if is_hub(self.path):
                file, rows = hub_rows(self.path, "HuggingFaceH4/MATH-500", None, ["test"], required=("problem", "answer"))
            else:
                file = data_file(self.path, "math500", "test.jsonl")
                rows = read_jsonl(file, required=("problem", "answer"))
            rows = rows[: self.limit]
            for lineno, row in rows:
                check_fields(file, lineno, row, {"problem": str, "answer": (str, int, float)})
            self._items = [
                {
                    "id": i,
                    "prompt": as_prompt(self.template.format(problem=row["problem"]), self.chat),
                    "answer": str(row["answer"]),
                    "subject": row.get("subject", ""),
                    "level": row.get("level", 0),
                    "unique_id": row.get("unique_id", ""),
                }
                for i, (_, row) in enumerate(rows)
            ]
        return self._items

