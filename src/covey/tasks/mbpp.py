"""MBPP (Mostly Basic Python Problems) as a code task verified in the sandbox.

"Program Synthesis with Large Language Models" (Austin et al., arXiv 2108.07732). Data (CC BY 4.0,
shipped in ``covey/tasks/data/mbpp`` with its provenance): the full ``mbpp.jsonl`` (974 problems) or,
with ``subset="sanitized"``, ``sanitized-mbpp.json`` (427 hand-checked problems), from `path` (the
mbpp folder or the file), else $COVEY_DATA, else the shipped copy; ``path="hub"`` loads
``google-research-datasets/mbpp`` (every split) with `datasets` instead.
Splits: test = task_id 11-510 (the official test split: 500 problems, 257 sanitized), train = every
other task_id (474, 170 sanitized). Tests = the ``test_list`` asserts, each preceded by
``test_setup_code`` (full; it uses the solution's classes, so it must run after the solution) or the
``test_imports`` (sanitized). Running code is `covey.rewards.code` / `covey.rewards.sandbox`; this
module only builds items and prompts.
"""

from __future__ import annotations

import ast
import os
import warnings

from covey.rewards.code import CodeReward
from covey.tasks._common import as_prompt, check_split
from covey.tasks._data import check_fields, data_file, hub_rows, is_hub, read_json, read_jsonl
from covey.tasks.registry import register_task

__all__ = ["MBPP"]

TEST_IDS = range(11, 511)
FILES = {"full": "mbpp.jsonl", "sanitized": "sanitized-mbpp.json"}
TEXT = {"full": "text", "sanitized": "prompt"}  # the problem statement's field
HUB_SPLITS = ("train", "test", "validation", "prompt")
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
    and ``{tests}``), `timeout_s` (per test), `memory_mb`, `subset` ("full" or "sanitized"), `path`.

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
        subset: str = "full",
        path: str | os.PathLike | None = None,
    ):
        if subset not in FILES:
            raise ValueError(f"subset must be 'full' or 'sanitized', got {subset!r}")
        if not 0 <= show_tests <= 3:
            raise ValueError(f"show_tests must be 0-3, got {show_tests}")
        for key in ("{text}", "{tests}"):
            if key not in template:
                raise ValueError(f"template must contain {key!r}, got {template!r}")
        self.show_tests, self.chat, self.template, self.subset = show_tests, chat, template, subset
        self.path = path if is_hub(path) else data_file(path, "mbpp", FILES[subset])
        self._verifier = CodeReward(mode="binary", timeout_s=timeout_s, memory_mb=memory_mb)
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            source, located = self._read()
            text = TEXT[self.subset]
            for lineno, r in located:
                check_fields(source, lineno, r, {"task_id": int, text: str, "code": str, "test_list": list})
                key = "test_setup_code" if self.subset == "full" else "test_imports"
                setup = r.get(key) or ("" if self.subset == "full" else [])
                setup_ok = isinstance(setup, str) if self.subset == "full" else (
                    isinstance(setup, list) and all(isinstance(t, str) for t in setup))
                bad = [t for t in r["test_list"] if not isinstance(t, str)]
                if bad or not setup_ok:
                    what = f"test_list entry {bad[0]!r}" if bad else f"{key} {r[key]!r}"
                    raise ValueError(f"{source}:{lineno}: {what} is not a string (asserts are Python source)"[:300])
            rows = [r for _, r in located]
            rows.sort(key=lambda r: r["task_id"])
            self._cache = {
                "test": [self._item(r) for r in rows if r["task_id"] in TEST_IDS],
                "train": [self._item(r) for r in rows if r["task_id"] not in TEST_IDS],
            }
        return self._cache[split]

    def reward(self, prompts, completions, tests, **_) -> list[float | None]:
        return self._verifier(prompts, completions, tests=tests)

    def _read(self) -> tuple[str, list[tuple[int, dict]]]:
        """(source name, [(line or entry number, row)]) of the whole subset."""
        required = ("task_id", TEXT[self.subset], "code", "test_list")
        if is_hub(self.path):
            return hub_rows(self.path, "google-research-datasets/mbpp", self.subset, HUB_SPLITS, required)
        if self.subset == "full":
            return str(self.path), read_jsonl(self.path, required)
        data = read_json(self.path)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ValueError(f"{self.path}: expected a JSON array of objects (sanitized MBPP)")
        for i, r in enumerate(data, start=1):
            missing = [k for k in required if k not in r]
            if missing:
                raise ValueError(f"{self.path}:{i}: missing field(s) {missing}; each entry needs {list(required)}")
        return str(self.path), list(enumerate(data, start=1))

    def _item(self, row: dict) -> dict:
        asserts = [t.replace("\r\n", "\n") for t in row["test_list"]]
        shown = "\n".join(asserts[: self.show_tests])
        # test_setup_code builds inputs from the solution's own classes (task 367: Node), so it runs
        # AFTER the solution: it goes in front of each assert, not into CodeTests.setup
        # (sanitized: the test_imports, which may run anywhere before the asserts)
        setup = row.get("test_setup_code") or "" if self.subset == "full" else "\n".join(row.get("test_imports") or [])
        setup = setup.replace("\r\n", "\n").strip()
        setup = setup + "\n" if setup else ""
        text = self.template.format(text=row[TEXT[self.subset]].strip(), tests=shown)
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
