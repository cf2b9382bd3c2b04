"""GSM8K grade-school word problems, scored with `math_equal`.

Loading, prompt building and the verifier; the data files (MIT, with their provenance) ship in
``covey/tasks/data/gsm8k`` (see its README); `covey.tasks._data` says where else data can come from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from covey.tasks._common import FinalAnswerTask, as_prompt, check_dataset_params, check_split
from covey.tasks._data import check_fields, data_file, hub_rows, is_hub, read_jsonl
from covey.tasks.registry import register_task

__all__ = ["GSM8K", "gsm8k_gold"]

DEFAULT_TEMPLATE = (
    "{question}\nSolve the problem step by step. Then write the final answer as a number on the "
    "last line, in the form '#### <number>'."
)


def gsm8k_gold(solution: str) -> str:
    """The gold answer of a GSM8K solution: the text after ``#### ``, commas stripped.

    >>> gsm8k_gold("2+1=<<2+1=3>>3 bolts\\n#### 1,080")
    '1080'
    """
    if "####" not in solution:
        raise ValueError(f"GSM8K solution has no '#### <answer>' line: {solution[-80:]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


@register_task("gsm8k")
class GSM8K(FinalAnswerTask):
    """GSM8K (Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems", arXiv 2110.14168).

    Answer format: the prompt asks for a last line ``#### <number>``; the verifier takes the
    first of (``#### x``, ``\\boxed{x}``, "answer is x", the last number) found in the completion,
    in that order (`order` changes it), and compares it to the gold number with `math_equal`
    (so "$1,080" and "1080.0" match 1080). Reward 1.0 / 0.0.

    >>> task = GSM8K(limit=1, chat=False)
    >>> item = task.examples("test")[0]
    >>> item["answer"], item["prompt"].startswith("Janet")
    ('18', True)
    >>> task.reward([item["prompt"]] * 2, ["9 * 2 = 18\\n#### 18", "#### $18.00"], answer=["18", "18"])
    [1.0, 1.0]

    Data: ``gsm8k/{train,test}.jsonl[.gz]`` (7473 / 1319 rows) under `path` (a folder, or one
    .jsonl file that then serves every split), else $COVEY_DATA, else the copy shipped with covey;
    ``path="hub"`` loads ``openai/gsm8k`` (config "main") with `datasets` instead.
    Params: `limit` (first n rows of a split), `chat`, `template` (with ``{question}``), `order`,
    `path`. Item: ``{"id" (line index), "prompt", "answer", "question", "solution"}``.
    """

    name = "gsm8k"
    answer_format = "A final line '#### <number>', e.g. '#### 18' (else \\boxed{}, 'The answer is', or the last number)."

    def __init__(
        self,
        *,
        path: str | os.PathLike | None = None,
        limit: int | None = None,
        chat: bool = True,
        template: str = DEFAULT_TEMPLATE,
        order: Sequence[str] = ("gsm8k", "boxed", "answer_is", "last_number"),
    ):
        check_dataset_params(template, "question", limit, order)
        self.path, self.limit, self.chat, self.template, self.order = path, limit, chat, template, tuple(order)
        self._cache: dict[str, list[dict]] = {}

    def demonstration(self, item: dict) -> str:
        """The reference solution, which ends in the '#### <answer>' line the prompt asks for."""
        return item["solution"]

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if split not in self._cache:
            if is_hub(self.path):
                file, rows = hub_rows(self.path, "openai/gsm8k", "main", [split], required=("question", "answer"))
            else:
                file = data_file(self.path, "gsm8k", f"{split}.jsonl")
                rows = read_jsonl(file, required=("question", "answer"))
            rows = rows[: self.limit]
            items = []
            for i, (lineno, row) in enumerate(rows):
                check_fields(file, lineno, row, {"question": str, "answer": str})
                try:
                    gold = gsm8k_gold(row["answer"])
                except ValueError as e:
                    raise ValueError(f"{file}:{lineno}: {e}") from None
                prompt = as_prompt(self.template.format(question=row["question"]), self.chat)
                items.append({"id": i, "prompt": prompt, "answer": gold, "question": row["question"], "solution": row["answer"]})
            self._cache[split] = items
        return self._cache[split]

