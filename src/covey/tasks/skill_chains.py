"""The `skill_chains` task: chains of similar word problems (one formula, new numbers) for SAGE's sequential
rollout (`rollout.strategy: sage_provisional`) in the `skill_library` environment (`covey.envs.skills`).

Each item is the first task of a chain and carries the rest in ``chain`` (`chain_length` - 1 more tasks of
the same scenario): a skill saved while solving the first (``perimeter(a, b) = 2*(a+b)``) solves the next.
Scenarios: rectangle perimeter, triangle area, average of three, order total with a fee, price after a
discount, average speed. Numbers are seeded; train and test come from separate streams. The verifier
checks a single answer's last number against the item's (so the first tasks also work without an env).
"""

from __future__ import annotations

import random

from covey.rewards.math import extract_answer, math_equal
from covey.tasks._common import check_split
from covey.tasks.registry import register_task

__all__ = ["SCENARIOS", "SkillChains"]


def _perimeter(r):
    a, b = r.randint(12, 99), r.randint(12, 99)
    return f"A rectangle has sides {a} and {b}. What is its perimeter?", 2 * (a + b)


def _triangle(r):
    a, b = r.randint(12, 99), 2 * r.randint(6, 49)
    return f"A triangle has base {a} and height {b}. What is its area?", a * b // 2


def _average(r):
    a, b = r.randint(10, 99), r.randint(10, 99)
    c = r.randint(10, 99)
    c += (-(a + b + c)) % 3  # a whole mean
    return f"What is the average of {a}, {b} and {c}?", (a + b + c) // 3


def _order(r):
    a, b, c = r.randint(3, 19), r.randint(12, 99), r.randint(5, 25)
    return f"{a} items cost {b} dollars each, plus a {c} dollar delivery fee. What is the total?", a * b + c


def _discount(r):
    a, b = 20 * r.randint(5, 50), 5 * r.randint(1, 9)
    return f"A price of {a} dollars is cut by {b} percent. What is the new price?", a * (100 - b) // 100


def _speed(r):
    b = r.randint(2, 9)
    a = b * r.randint(30, 110)
    return f"A car drives {a} km in {b} hours. What is its average speed in km per hour?", a // b


SCENARIOS = {"perimeter": _perimeter, "triangle": _triangle, "average": _average, "order": _order,
             "discount": _discount, "speed": _speed}  # fmt: skip


@register_task("skill_chains")
class SkillChains:
    """Chains of similar problems ``{"id", "prompt", "answer", "scenario", "chain": [{"id", "prompt", "answer",
    "scenario"}, ...]}`` (module docstring). Params: n_train, n_test, chain_length (2: SAGE's main setting),
    scenarios (a subset of SCENARIOS), seed."""

    name = "skill_chains"
    answer_format = "The number only."

    def __init__(self, *, n_train: int = 64, n_test: int = 16, chain_length: int = 2, scenarios: list[str] | None = None,
                 seed: int = 0):  # fmt: skip
        if n_train < 1 or n_test < 0 or chain_length < 1:
            raise ValueError(f"skill_chains: need n_train >= 1, n_test >= 0, chain_length >= 1 (got {n_train}, {n_test}, {chain_length})")
        unknown = sorted(set(scenarios or ()) - set(SCENARIOS))
        if unknown:
            raise ValueError(f"skill_chains: unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
        self.n, self.length, self.seed = {"train": n_train, "test": n_test}, chain_length, seed
        self.scenarios = list(scenarios or SCENARIOS)

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        rng = random.Random((self.seed * 2 + (split == "test")) * 1_000_003)
        n, out = self.n[split], []
        for i in range(n):
            scenario = self.scenarios[i % len(self.scenarios)]
            tasks = [SCENARIOS[scenario](rng) for _ in range(self.length)]
            # the follow-up tasks get ids after the split's first tasks (rows of a chain name their own task)
            chain = [{"id": n + i * (self.length - 1) + k, "prompt": q, "answer": str(a), "scenario": scenario}
                     for k, (q, a) in enumerate(tasks[1:])]  # fmt: skip
            out.append({"id": i, "prompt": tasks[0][0], "answer": str(tasks[0][1]), "scenario": scenario, "chain": chain})
        return out

    def reward(self, prompts, completions, answer, **_) -> list[float]:
        return [1.0 if math_equal(extract_answer(c if isinstance(c, str) else c[-1]["content"], order=["last_number"]), str(a))
                else 0.0 for c, a in zip(completions, answer)]  # fmt: skip
