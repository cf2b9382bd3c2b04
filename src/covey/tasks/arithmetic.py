"""Generated integer arithmetic ("23 + 45 - 7"): the quickstart task, no data files needed.

Covers generation (reproducible by seed, train/test disjoint by construction) and the verifier.
Model loading and calibration runs are outside (their numbers are recorded in docs/tasks.md).
"""

from __future__ import annotations

import itertools
import random

from covey.tasks._common import FinalAnswerTask, as_prompt, check_split
from covey.tasks._expr import evaluate
from covey.tasks.registry import register_task

__all__ = ["Arithmetic"]

DEFAULT_TEMPLATE = "What is {expression}? Answer with the number only."
_ENUMERATE_LIMIT = 2_000_000  # small problem spaces are enumerated instead of sampled


@register_task("arithmetic")
class Arithmetic(FinalAnswerTask):
    """Integer arithmetic with `operands` numbers of `digits` digits joined by operators from `ops`.

    Answer format: the LAST number in the completion is the answer (so "23 + 45 = 68", "68" and
    "The answer is 68." all give 68); it must equal the exact value (usual precedence: * before
    + and -). Reward 1.0 if equal, else 0.0.

    >>> task = Arithmetic(digits=2, operands=2, ops="+", n_train=3, n_test=2, chat=False)
    >>> item = task.examples("test")[0]
    >>> item["prompt"] == f"What is {item['expression']}? Answer with the number only."
    True
    >>> task.reward([item["prompt"]] * 2, [f"{item['expression']} = {item['answer']}", "0"],
    ...             answer=[item["answer"]] * 2)
    [1.0, 0.0]

    Params: `digits` (1-9; operands drawn uniformly from [10^(d-1), 10^d - 1], so 1..9 for d=1),
    `operands` (2-8), `ops` (a subset of "+-*"), `n_train`/`n_test` (items per split), `seed`,
    `nonnegative` (redraw problems whose value is negative), `chat` (prompt as one user message
    instead of plain text), `template` (must contain ``{expression}``).

    Splits: the test split is drawn first from its own seeded stream, then the train split from
    another stream, skipping every test expression and duplicates, so the two are disjoint and the
    test split does not change when `n_train` does. Item: ``{"id", "prompt", "answer" (str of the
    integer value), "expression"}``.

    Calibrated quickstart preset = the defaults: ``digits=1, operands=2, ops="+-*"`` (207 problems
    in all; 100 train + 100 test). Base SmolLM2-135M-Instruct (bf16, chat template, 24 new tokens)
    on the 100 test prompts: greedy 0.50, sampled T=0.7 0.31 and T=1.0 0.195 (200 samples each);
    about 12-19 completion tokens. docs/tasks.md has the full measurement and the settings tried.
    """

    name = "arithmetic"
    order = ("last_number",)
    answer_format = "The last number in the completion is the answer, e.g. '23 + 45 = 68' -> 68."

    def __init__(
        self,
        *,
        digits: int = 1,
        operands: int = 2,
        ops: str = "+-*",
        n_train: int = 100,
        n_test: int = 100,
        seed: int = 0,
        nonnegative: bool = True,
        chat: bool = True,
        template: str = DEFAULT_TEMPLATE,
    ):
        _check_int("digits", digits, 1, 9)
        _check_int("operands", operands, 2, 8)
        _check_int("n_train", n_train, 0, 10**7)
        _check_int("n_test", n_test, 0, 10**7)
        if not isinstance(ops, str) or not ops or set(ops) - set("+-*") or len(set(ops)) != len(ops):
            raise ValueError(f"ops must be a non-empty string of distinct operators from '+-*', got {ops!r}")
        if "{expression}" not in template:
            raise ValueError(f"template must contain '{{expression}}', got {template!r}")
        self.digits, self.operands, self.ops = digits, operands, ops
        self.n_train, self.n_test, self.seed = n_train, n_test, seed
        self.nonnegative, self.chat, self.template = nonnegative, chat, template
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            test = self._draw(self.n_test, random.Random(f"covey-arithmetic-test-{self.seed}"), exclude=set())
            train = self._draw(
                self.n_train, random.Random(f"covey-arithmetic-train-{self.seed}"), exclude={e for e, _ in test}
            )
            self._cache = {"test": self._items(test), "train": self._items(train)}
        return self._cache[split]


    def demonstration(self, item: dict) -> str:
        """The target completion for a supervised warm start (`covey sft`): the number alone."""
        return str(item["answer"])

    # --- generation -------------------------------------------------------------------------

    def _items(self, problems: list[tuple[str, int]]) -> list[dict]:
        return [
            {"id": i, "prompt": as_prompt(self.template.format(expression=e), self.chat), "answer": str(v), "expression": e}
            for i, (e, v) in enumerate(problems)
        ]

    def _space(self) -> int:
        lo, hi = self._range()
        return (hi - lo + 1) ** self.operands * len(self.ops) ** (self.operands - 1)

    def _range(self) -> tuple[int, int]:
        return 10 ** (self.digits - 1), 10**self.digits - 1

    def _value(self, expression: str) -> int | None:
        value = evaluate(expression)[0]  # exact; integer since there is no division
        return None if self.nonnegative and value < 0 else int(value)

    def _draw(self, count: int, rng: random.Random, exclude: set[str]) -> list[tuple[str, int]]:
        if count == 0:
            return []
        space = self._space()
        if space <= _ENUMERATE_LIMIT and 2 * (count + len(exclude)) > space:
            return self._draw_enumerated(count, rng, exclude)
        lo, hi = self._range()
        seen, out = set(exclude), []
        for _ in range(100 * count + 1000):
            nums = [rng.randint(lo, hi) for _ in range(self.operands)]
            opers = [rng.choice(self.ops) for _ in range(self.operands - 1)]
            expression = _join(nums, opers)
            if expression in seen:
                continue
            seen.add(expression)
            value = self._value(expression)
            if value is not None:
                out.append((expression, value))
                if len(out) == count:
                    return out
        raise ValueError(self._too_many(count, len(out)))

    def _draw_enumerated(self, count: int, rng: random.Random, exclude: set[str]) -> list[tuple[str, int]]:
        lo, hi = self._range()
        pool = []
        for nums in itertools.product(range(lo, hi + 1), repeat=self.operands):
            for opers in itertools.product(self.ops, repeat=self.operands - 1):
                expression = _join(nums, opers)
                if expression not in exclude and (value := self._value(expression)) is not None:
                    pool.append((expression, value))
        if len(pool) < count:
            raise ValueError(self._too_many(count, len(pool)))
        rng.shuffle(pool)
        return pool[:count]

    def _too_many(self, wanted: int, found: int) -> str:
        return (
            f"arithmetic(digits={self.digits}, operands={self.operands}, ops={self.ops!r}, "
            f"nonnegative={self.nonnegative}) has only {found} distinct problems left for a split "
            f"that wants {wanted}: lower n_train/n_test or raise digits/operands"
        )


def _join(nums, opers) -> str:
    parts = [str(nums[0])]
    for op, n in zip(opers, nums[1:]):
        parts += [op, str(n)]
    return " ".join(parts)


def _check_int(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")
