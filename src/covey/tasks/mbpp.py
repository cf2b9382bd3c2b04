"""MBPP (Mostly Basic Python Problems) as a code task verified in the sandbox.

"Program Synthesis with Large Language Models" (Austin et al., arXiv 2108.07732). Data: the full
``mbpp.jsonl`` (974 problems) from `path` (the mbpp folder or the file), else $COVEY_DATA, else
``<repo>/../shared/data/mbpp``.
Splits: test = task_id 11-510 (the official test split, 500 problems), train = every other task_id
(474). Tests = the ``test_list`` asserts, each preceded by ``test_setup_code`` (which uses the
solution's classes, so it must run after the solution). Running code is
`covey.rewards.code` / `covey.rewards.sandbox`; this module only builds items and prompts.
"""

from __future__ import annotations

import ast
import os
import warnings

from covey.rewards.code import CodeReward
from covey.tasks._common import as_prompt, check_split
from covey.tasks._data import check_fields, read_jsonl, resolve_data_dir
from covey.tasks.registry import register_task

__all__ = ["MBPP"]

TEST_IDS = range(11, 511)
DEFAULT_TEMPLATE = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass these tests:\n\n{tests}\n\n"
    "Write your complete solution in one ```python code block."
)


@register_task("mbpp")
class MBPP:
    """MBPP problems; the completion's last ```python block must pass the problem's asserts.

    Item: ``{"id": task_id, "prompt", "answer": reference solution, "tests": {"asserts"}}``. Reward: 1.0 when every assert passes in the
    sandbox, else 0.0 (`covey.rewards.code.CodeReward` gives the fraction instead).
    Params: `show_tests` (how many asserts the prompt shows, default 1 like EvalPlus, so training
    cannot simply copy all the answers; the MBPP paper shows 3), `chat`, `template` (with ``{text}``
    and ``{tests}``), `timeout_s` (per test), `memory_mb`, `path`.

    >>> task = MBPP(chat=False)
    >>> item = task.examples("test")[0]
    >>> item["id"], item["tests"]["asserts"][0]
    (11, 'assert remove_Occ("hello","l") == "heo"')
    >>> task.reward([item["prompt"]], ["```python\\n" + item["answer"] + "\\n```"], tests=[item["tests"]])
    [1.0]
    """

    name = "mbpp"
    answer_format = "A ```python code block defining the requested function; it must pass the problem's asserts."

    def __init__(
        self,
        *,
        show_tests: int = 1,
        chat: bool = True,
        template: str = DEFAULT_TEMPLATE,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        path: str | os.PathLike | None = None,
    ):
        if not 0 <= show_tests <= 3:
            raise ValueError(f"show_tests must be 0-3, got {show_tests}")
        for key in ("{text}", "{tests}"):
            if key not in template:
                raise ValueError(f"template must contain {key!r}, got {template!r}")
        self.show_tests, self.chat, self.template = show_tests, chat, template
        self.path = path if path is not None and os.path.isfile(path) else resolve_data_dir(path, "mbpp") / "mbpp.jsonl"
        self._verifier = CodeReward(mode="binary", timeout_s=timeout_s, memory_mb=memory_mb)
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            located = read_jsonl(self.path, required=("task_id", "text", "code", "test_list"))
            for lineno, r in located:
                check_fields(self.path, lineno, r, {"task_id": int, "text": str, "code": str, "test_list": list})
                bad = [t for t in r["test_list"] if not isinstance(t, str)]
                if bad or not isinstance(r.get("test_setup_code") or "", str):
                    what = f"test_list entry {bad[0]!r}" if bad else f"test_setup_code {r['test_setup_code']!r}"
                    raise ValueError(f"{self.path}:{lineno}: {what} is not a string (asserts are Python source)"[:300])
            rows = [r for _, r in located]
            rows.sort(key=lambda r: r["task_id"])
            self._cache = {
                "test": [self._item(r) for r in rows if r["task_id"] in TEST_IDS],
                "train": [self._item(r) for r in rows if r["task_id"] not in TEST_IDS],
            }
        return self._cache[split]

    def reward(self, prompts, completions, tests, **_) -> list[float | None]:
        return self._verifier(prompts, completions, tests=tests)

    def _item(self, row: dict) -> dict:
        asserts = [t.replace("\r\n", "\n") for t in row["test_list"]]
        shown = "\n".join(asserts[: self.show_tests])
        # test_setup_code builds inputs from the solution's own classes (task 367: Node), so it runs
        # AFTER the solution: it goes in front of each assert, not into CodeTests.setup
        setup = (row.get("test_setup_code") or "").replace("\r\n", "\n").strip()
        setup = setup + "\n" if setup else ""
        text = self.template.format(text=row["text"].strip(), tests=shown)
        return {
            "id": row["task_id"],
            "prompt": as_prompt(text, self.chat),
            "answer": row["code"].replace("\r\n", "\n"),
            "tests": {"asserts": [setup + t for t in asserts], "functions": _entry_points(row["code"], asserts)},
        }


def _entry_points(code: str, asserts: list[str]) -> list[str]:
    """The reference's top-level functions and classes that the asserts use (task 126 tests a
    function named ``sum``: listed, the sandbox lets the program's ``sum`` shadow the builtin)."""
    try:
        with warnings.catch_warnings():  # MBPP's sources have invalid escapes such as "\d"
            warnings.simplefilter("ignore")
            defined = {n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            used = {n.id for t in asserts for n in ast.walk(ast.parse(t)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return []
    return sorted(defined & used)
