"""A tiny local prime-intellect `verifiers` environment (no hub, no network): sums of two numbers.

``load_environment(kind="multi")`` is a `vf.MultiTurnEnv`: the user asks for a + b; an answer whose
last number is wrong gets "Not quite, try again." and another turn, up to `max_turns`; the rubric
gives 1.0 when the final answer's last number is a + b, else 0.0. ``kind="single"`` is the same task
as a `vf.SingleTurnEnv`. The dataset is generated from `seed` (`n` train items, `n_eval` eval items).

Used by covey's tests and `examples/agents/verifiers_sum.yaml`; a template for your own:
``task: {name: verifiers, params: {env: covey.envs.verifiers_example:load_environment}}``.
Needs ``pip install 'covey[verifiers]'``.
"""

from __future__ import annotations

import random
import re

__all__ = ["RETRY", "SYSTEM", "last_number", "load_environment"]

SYSTEM = "Answer with the number only."
RETRY = "Not quite, try again."
_NUMBER = re.compile(r"-?\d+")


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text or "")
    return found[-1] if found else None


def _rows(n: int, seed: int, digits: int) -> list[dict]:
    rng = random.Random(seed)
    hi = 10**digits - 1
    out = []
    for _ in range(n):
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        out.append({"question": f"What is {a} + {b}?", "answer": str(a + b)})
    return out


def _text(message) -> str:
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    return content if isinstance(content, str) else ""


def load_environment(kind: str = "multi", n: int = 32, n_eval: int = 8, digits: int = 1, max_turns: int = 3,
                     seed: int = 0):  # fmt: skip
    import verifiers as vf
    from datasets import Dataset

    if kind not in ("multi", "single"):
        raise ValueError(f"verifiers_example: kind must be multi or single, got {kind!r}")

    def final_answer(completion, answer, **_) -> float:
        said = [m for m in completion if (m.get("role") if isinstance(m, dict) else m.role) == "assistant"]
        return 1.0 if said and last_number(_text(said[-1])) == answer else 0.0

    rubric = vf.Rubric(funcs=[final_answer], weights=[1.0])
    data = {"dataset": Dataset.from_list(_rows(n, seed, digits)),
            "eval_dataset": Dataset.from_list(_rows(n_eval, seed + 1, digits)),
            "system_prompt": SYSTEM, "rubric": rubric}  # fmt: skip
    if kind == "single":
        return vf.SingleTurnEnv(**data)

    class SumEnv(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            return [vf.UserMessage(content=RETRY)]

        @vf.stop
        async def answered(self, state) -> bool:
            steps = state["trajectory"]
            if not steps:
                return False
            said = [m for m in steps[-1]["completion"] if m.role == "assistant"]
            return bool(said) and last_number(_text(said[-1])) == state["answer"]

    return SumEnv(max_turns=max_turns, **data)
