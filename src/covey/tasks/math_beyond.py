r"""`math_beyond`: MATH-Beyond (MATH-B) from a local copy, with its per-model unsolved subsets.

Paper: "MATH-Beyond: A Benchmark for RL to Expand Beyond the Base Model" (arXiv 2510.11653); data:
the Hugging Face dataset ``brendel-group/MATH-Beyond`` (MIT): 181 problems (``test.csv`` /
``test.parquet``, one split), chosen so that base models up to 8B fail at pass@1024, drawn from
DAPO-Math-17K and DeepScaleR, integer answers, with topic and difficulty labels and the unsolved
subset of each of 21 base models. The data is on the Hub only (not on PyPI) and covey loads it from a
local copy: download it where there is network (``huggingface-cli download brendel-group/MATH-Beyond
--repo-type dataset --local-dir data/math_beyond``) and pass the file or the folder.

Reconstructed loader: the dataset card was read (sizes, files, subsets) but not its column names, so
every column is named by a parameter (`problem_key`, `answer_key`, `unsolved_key`); the defaults
``problem`` / ``answer`` are the usual names of its two source datasets.

The subset of a base model (the benchmark's zero-baseline set: pass@1024 = 0 for that model) is
chosen with `unsolved_by`: one model name, or a list (the rows unsolved by every one of them: all 21
give MATH-B-I, the intersection). A row records its unsolved models in either layout:

    a column `unsolved_key` holding a list of model names (or a string of them separated by , or ;)
    one column per model, named by the model, truthy (1, true, "yes") where that model fails

The metrics are `covey compare coverage` on the samples of the base and of the trained model
(`covey eval --samples-out`): expansion, shrinkage, preservation and the expansion rate
(|expansion| / |problems the base never solves at k|; on the base's own unsolved subset this is the
trained model's pass@k).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from covey.tasks._common import FinalAnswerTask, as_prompt, check_dataset_params, check_split
from covey.tasks.registry import register_task

__all__ = ["MathBeyond", "unsolved_models"]

DEFAULT_TEMPLATE = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
_FILES = ("test.parquet", "test.csv", "test.jsonl")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


def unsolved_models(row: dict, unsolved_key: str, models: Sequence[str], where: str) -> set[str]:
    """The models of `models` that fail on `row` (either layout of the module docstring)."""
    if unsolved_key in row:
        val = row[unsolved_key]
        if isinstance(val, str):
            names = [n.strip() for n in val.replace(";", ",").split(",")]
        elif isinstance(val, (list, tuple)) or hasattr(val, "tolist"):
            names = [str(n).strip() for n in (val.tolist() if hasattr(val, "tolist") else val)]
        elif val is None:
            names = []
        else:
            raise ValueError(f"{where}: {unsolved_key!r} must list model names (a list, or a string separated by , or ;), "
                             f"got {type(val).__name__} {val!r}")  # fmt: skip
        return {m for m in models if m in set(names)}
    out = set()
    for m in models:
        if m not in row:
            raise ValueError(f"{where}: neither an {unsolved_key!r} column nor a column named {m!r}; set unsolved_key=... "
                             f"(columns: {sorted(row)})")  # fmt: skip
        v = row[m]
        s = str(v).strip().lower() if not isinstance(v, bool) else str(v).lower()
        if s in _TRUE:
            out.add(m)
        elif s not in _FALSE and v is not None:
            raise ValueError(f"{where}: column {m!r} must be a flag (1/0, true/false, yes/no), got {v!r}")
    return out


@register_task("math_beyond")
class MathBeyond(FinalAnswerTask):
    r"""MATH-Beyond from a local copy (see the module docstring).

    Params: `path` (a ``.parquet``, ``.csv`` or ``.jsonl`` file, or a folder holding ``test.parquet``,
    ``test.csv`` or ``test.jsonl``; required), `problem_key` ("problem"), `answer_key` ("answer"),
    `unsolved_by` (None: all rows, MATH-B-U; a model name or a list: the rows every one of them fails),
    `unsolved_key` ("unsolved_by"), `limit`, `chat`, `template` (with ``{problem}``), `order`.
    Split "test" only. Item: ``{"id" (row index in the file), "prompt", "answer", ...}`` with every
    other column kept (topic, difficulty: `covey compare ... --by` can split by them).

    Verifier: the last ``\boxed{}`` (else "answer is x"), compared with `math_equal`; 1.0 / 0.0.
    """

    name = "math_beyond"
    answer_format = "The final answer in \\boxed{}, e.g. '\\boxed{42}' (the last box counts)."

    def __init__(
        self,
        *,
        path: str | os.PathLike | None = None,
        problem_key: str = "problem",
        answer_key: str = "answer",
        unsolved_by: str | list[str] | None = None,
        unsolved_key: str = "unsolved_by",
        limit: int | None = None,
        chat: bool = True,
        template: str = DEFAULT_TEMPLATE,
        order: Sequence[str] = ("boxed", "answer_is"),
    ):
        if path is None:
            raise ValueError("task 'math_beyond' needs path=... (a local copy of brendel-group/MATH-Beyond: test.parquet, "
                             "test.csv or test.jsonl, or their folder); covey does not download it")  # fmt: skip
        check_dataset_params(template, "problem", limit, order)
        models = [unsolved_by] if isinstance(unsolved_by, str) else list(unsolved_by or [])
        if unsolved_by is not None and (not models or not all(isinstance(m, str) and m for m in models)):
            raise ValueError(f"task 'math_beyond': unsolved_by must be a model name or a non-empty list of them, got {unsolved_by!r}")
        if problem_key == answer_key:
            raise ValueError(f"task 'math_beyond': problem_key and answer_key are both {problem_key!r}")
        self.path, self.problem_key, self.answer_key = Path(path).expanduser(), problem_key, answer_key
        self.models, self.unsolved_key = models, unsolved_key
        self.limit, self.chat, self.template, self.order = limit, chat, template, tuple(order)
        self._items: list[dict] | None = None

    def _file(self) -> Path:
        if self.path.is_dir():
            for name in _FILES:
                if (self.path / name).is_file():
                    return self.path / name
            raise FileNotFoundError(f"task 'math_beyond': {self.path} holds none of {', '.join(_FILES)}")
        if not self.path.is_file():
            raise FileNotFoundError(f"task 'math_beyond': {self.path} does not exist (a local copy of brendel-group/MATH-Beyond)")
        return self.path

    def examples(self, split: str = "test") -> list[dict]:
        check_split(self.name, split, allowed=("test",))
        if self._items is None:
            from covey.tasks.dataset import load_rows

            file = self._file()
            items = []
            for i, (where, row) in enumerate(load_rows(file)):
                items.extend(self._item(i, where, row))
            if not items:
                raise ValueError(f"task 'math_beyond': no row of {file} is unsolved by {self.models}")
            self._items = items[: self.limit]
        return self._items

    def _item(self, i: int, where: str, row: Any) -> list[dict]:
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a mapping of columns, got {type(row).__name__}")
        for key in (self.problem_key, self.answer_key):
            if key not in row:
                raise ValueError(f"{where}: no {key!r} column (columns: {sorted(row)}); set problem_key / answer_key")
        problem, answer = row[self.problem_key], row[self.answer_key]
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(f"{where}: {self.problem_key!r} must be a non-empty string, got {problem!r}")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"{where}: {self.answer_key!r} must be a string or a number, got {answer!r}")
        if self.models and unsolved_models(row, self.unsolved_key, self.models, where) != set(self.models):
            return []
        item = {k: v for k, v in row.items() if k not in (self.problem_key, self.answer_key, "prompt", "id")}
        if "id" in row:  # covey ids are row indices; the file's own id is kept
            item["row_id"] = row["id"]
        answer = str(int(answer)) if isinstance(answer, float) and answer.is_integer() else str(answer)
        return [{**item, "id": i, "prompt": as_prompt(self.template.format(problem=problem), self.chat), "answer": answer}]
