"""Countdown (TinyZero-style): reach a target number with the given numbers and + - * /.

Covers reproducible generation (every problem is solvable by construction) and a verifier that
reads the model's expression with `ast` (see `_expr.evaluate`): never eval/exec on model text.
"""

from __future__ import annotations

import random
import re
from collections import Counter

from covey.tasks._common import as_prompt, check_counts, check_split, completion_text
from covey.tasks._expr import ExpressionError, evaluate
from covey.tasks.registry import register_task

__all__ = ["Countdown", "extract_expression"]

PROMPT = (
    "Using the numbers {nums}, create an equation that equals {target}. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can be used at most once. Show your work in <think> </think> "
    "tags. And return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
)
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.S)
# a run of digits, spaces, operators and brackets with at least one operator between two numbers
_EXPR_RUN_RE = re.compile(r"[\d(][\d\s+\-*/()×÷]*\d\)*")


def extract_expression(text: str, *, require_tags: bool = False) -> str | None:
    """The expression in the last ``<answer>...</answer>``, else the last arithmetic run in the text.

    An ``=`` inside the answer ends the expression ("(1 + 2) / 3 = 1" -> "(1 + 2) / 3").

    >>> extract_expression("<think>7*8=56</think> <answer> 7 * 8 + 1 = 57 </answer>")
    '7 * 8 + 1'
    >>> extract_expression("so 7 * 8 + 1 works"), extract_expression("no", require_tags=True)
    ('7 * 8 + 1', None)
    """
    tags = _ANSWER_TAG_RE.findall(text)
    if tags:
        return tags[-1].split("=")[0].strip() or None
    if require_tags:
        return None
    runs = [r for r in _EXPR_RUN_RE.findall(text) if re.search(r"\d\)*\s*[-+*/×÷]", r)]
    return runs[-1].strip() if runs else None


@register_task("countdown")
class Countdown:
    """Combine some of the given numbers with + - * / and parentheses to reach the target.

    Answer format: an expression in ``<answer> </answer>`` tags (TinyZero's prompt), e.g.
    ``<answer> (25 - 5) * 4 </answer>``; without tags the last arithmetic expression in the text
    is read. Reward 1.0 when the expression uses only given numbers, each at most once (a
    sub-multiset; all of them with ``use_all=True``, as TinyZero's verifier demands), and its exact
    value (fractions, so ``/`` must divide out) equals the target; `format_score` (TinyZero: 0.1,
    default 0.0) when an expression was found but is wrong; 0.0 when there is none.

    >>> task = Countdown(n_train=0, n_test=2, chat=False)
    >>> item = task.examples("test")[1]
    >>> item["nums"], item["target"], item["solution"]
    ([28, 77, 45, 8], 52, '28 + 77 - (45 + 8)')
    >>> task.reward([item["prompt"]] * 3, ["<answer> 77 - 45 + 28 - 8 </answer>", "<answer>45 + 7</answer>",
    ...             "<answer>77 - 25</answer>"], **{k: [item[k]] * 3 for k in ("nums", "target")})
    [1.0, 0.0, 0.0]

    Params: `min_numbers`/`max_numbers` (how many numbers, default 3-4 as TinyZero's
    Countdown-Tasks-3to4), `max_number` (numbers drawn from 1..max_number), `min_target`/
    `max_target`, `n_train`/`n_test`, `seed`, `use_all`, `require_tags`, `format_score`, `chat`.

    Generation departs from TinyZero (whose random targets need not be reachable): numbers are
    drawn, then combined at random in a binary tree whose intermediate results stay positive
    integers, and the result is the target (redrawn if outside the target range); the tree is kept
    as `solution`. Test is drawn first, and train skips test's (numbers, target) pairs.
    Item: ``{"id", "prompt", "answer" (the target as str), "target", "nums", "solution"}``.
    """

    name = "countdown"
    answer_format = "An expression in <answer> </answer> tags using the given numbers at most once, e.g. <answer> (25 - 5) * 4 </answer>."

    def __init__(
        self,
        *,
        min_numbers: int = 3,
        max_numbers: int = 4,
        max_number: int = 99,
        min_target: int = 10,
        max_target: int = 100,
        n_train: int = 2000,
        n_test: int = 200,
        seed: int = 0,
        use_all: bool = False,
        require_tags: bool = False,
        format_score: float = 0.0,
        chat: bool = True,
    ):
        if not 2 <= min_numbers <= max_numbers <= 8:
            raise ValueError(f"need 2 <= min_numbers <= max_numbers <= 8, got {min_numbers}, {max_numbers}")
        if not 1 <= max_number <= 10_000 or not 1 <= min_target <= max_target:
            raise ValueError(
                f"need 1 <= max_number <= 10000 and 1 <= min_target <= max_target, got "
                f"max_number={max_number}, min_target={min_target}, max_target={max_target}"
            )
        check_counts(n_train, n_test)
        if not 0.0 <= format_score < 1.0:
            raise ValueError(f"format_score must be in [0, 1), got {format_score}")
        self.min_numbers, self.max_numbers, self.max_number = min_numbers, max_numbers, max_number
        self.min_target, self.max_target = min_target, max_target
        self.n_train, self.n_test, self.seed = n_train, n_test, seed
        self.use_all, self.require_tags, self.format_score, self.chat = use_all, require_tags, format_score, chat
        self._cache: dict[str, list[dict]] = {}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if not self._cache:
            test = self._draw(self.n_test, random.Random(f"covey-countdown-test-{self.seed}"), exclude=set())
            exclude = {(tuple(sorted(n)), t) for n, t, _ in test}
            train = self._draw(self.n_train, random.Random(f"covey-countdown-train-{self.seed}"), exclude)
            self._cache = {"test": self._items(test), "train": self._items(train)}
        return self._cache[split]

    def demonstration(self, item: dict) -> str:
        """A known solution in the answer format, for a supervised warm start."""
        return f"<answer> {item['solution']} </answer>"

    def reward(self, prompts, completions, nums, target, **_) -> list[float | None]:
        if not len(completions) == len(nums) == len(target):
            raise ValueError(f"got {len(completions)} completions, {len(nums)} nums, {len(target)} targets")
        return [self.score(completion_text(c), n, t) for c, n, t in zip(completions, nums, target)]

    def score(self, text: str, nums: list[int], target: int) -> float:
        """The reward of one completion (see the class docstring)."""
        expression = extract_expression(text, require_tags=self.require_tags)
        if expression is None:
            return 0.0
        try:
            value, used = evaluate(expression)
        except ExpressionError:
            return self.format_score
        given, counted = Counter(int(x) for x in nums), Counter(used)
        numbers_ok = counted == given if self.use_all else not (counted - given)
        return 1.0 if numbers_ok and value == int(target) else self.format_score

    # --- generation -------------------------------------------------------------------------

    def _items(self, problems) -> list[dict]:
        return [
            {
                "id": i,
                "prompt": as_prompt(PROMPT.format(nums=list(n), target=t), self.chat),
                "answer": str(t),
                "target": t,
                "nums": list(n),
                "solution": s,
            }
            for i, (n, t, s) in enumerate(problems)
        ]

    def _draw(self, count: int, rng: random.Random, exclude: set) -> list[tuple[list[int], int, str]]:
        seen, out = set(exclude), []
        for _ in range(200 * count + 1000 if count else 0):
            nums = [rng.randint(1, self.max_number) for _ in range(rng.randint(self.min_numbers, self.max_numbers))]
            built = _random_tree(nums, rng)
            if built is None:
                continue
            target, solution = built
            key = (tuple(sorted(nums)), target)
            if not self.min_target <= target <= self.max_target or key in seen:
                continue
            seen.add(key)
            out.append((nums, target, solution))
            if len(out) == count:
                return out
        if count:
            raise ValueError(f"countdown: found only {len(out)} distinct problems of {count} wanted; widen the ranges")
        return out


def _random_tree(nums: list[int], rng: random.Random) -> tuple[int, str] | None:
    """Combine all numbers pairwise at random, keeping every intermediate a positive integer."""
    pool = [(n, str(n)) for n in nums]
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        (a, ea), (b, eb) = pool[i], pool[j]
        choices = [(a + b, f"{ea} + {eb}"), (a * b, f"{_wrap(ea)} * {_wrap(eb)}")]
        if a > b:
            choices.append((a - b, f"{ea} - {_wrap(eb)}"))
        if b > 1 and a % b == 0:
            choices.append((a // b, f"{_wrap(ea)} / {_wrap(eb)}"))
        value, expr = rng.choice(choices)
        pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [(value, expr)]
    value, expr = pool[0]
    return (value, expr) if value > 0 else None


def _wrap(expr: str) -> str:
    return f"({expr})" if " " in expr else expr
