"""`solver_verifier`: a two-agent environment (agent 0 the solver, agent 1 the verifier) over any
task whose items carry an ``answer`` (e.g. ``task: {name: arithmetic}``), for per-agent credit
(Dr. MAS, the `dr_mas` estimator). One policy plays both roles; each turn's role is
``info["agent"]`` (recorded in `Rollouts.step_agents`).

The loop follows Dr. MAS's math orchestra (langfengQ/DrMAS 19c632b,
`agent_system/agent/orchestra/math/math_orchestra.py`): up to `max_rounds` rounds of the solver
answering, then the verifier judging; the verifier's "approve" ends the episode, "reject" (or a
verdict without either word, counted invalid) sends the solver back; the last round has no verifier
turn. The reward, on the last step, is 1.0 when the solver's last answer (its last number) is the
item's answer, else 0.0, for every role alike (the code gives each agent's rows the episode reward).
The prompts are covey's own (short, for small models), not the repository's.
"""

from __future__ import annotations

import copy
import re

from covey.envs.base import Action, StepResult, register_env
from covey.rewards.math import extract_answer, math_equal

__all__ = ["SolverVerifierEnv"]

SOLVER, VERIFIER = 0, 1
SOLVER_RULES = "Solve the problem. End your reply with the final number."
VERIFIER_RULES = "You are the verifier. Check the solution below. Reply approve if it is correct, reject if not."
_VERDICT = re.compile(r"\b(approve|reject)\b", re.IGNORECASE)


@register_env("solver_verifier")
class SolverVerifierEnv:
    """Solver (agent 0) and verifier (agent 1) take turns; `max_rounds` solver turns at most."""

    tools = None

    def __init__(self, *, max_rounds: int = 3):
        if max_rounds < 1:
            raise ValueError(f"solver_verifier max_rounds must be >= 1, got {max_rounds}")
        self.max_rounds = max_rounds
        self.problem, self.answer, self.solution, self.round, self.next_agent = "", "", "", 0, SOLVER

    def reset(self, item: dict, *, seed: int) -> StepResult:
        if "answer" not in item:
            raise ValueError(f"the solver_verifier environment needs items with an 'answer' (item {item.get('id')} has none)")
        prompt = item["prompt"]
        self.problem = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        self.answer, self.solution, self.round, self.next_agent = str(item["answer"]), "", 0, SOLVER
        return StepResult([{"role": "user", "content": f"{SOLVER_RULES}\n{self.problem}"}], anchor=(0, SOLVER),
                          info={"agent": SOLVER})  # fmt: skip

    def _correct(self) -> bool:
        return math_equal(extract_answer(self.solution, order=["last_number"]), self.answer)

    def _end(self, valid: bool = True) -> StepResult:
        ok = self._correct()
        return StepResult([], 1.0 if ok else 0.0, terminated=True, anchor=(self.round, SOLVER),
                          info={"valid": valid, "success": ok, "agent": SOLVER})  # fmt: skip

    def step(self, action: Action) -> StepResult:
        return self._solver(action) if self.next_agent == SOLVER else self._verifier(action)

    def _solver(self, action: Action) -> StepResult:
        self.solution = action.text.strip()
        if self.round + 1 >= self.max_rounds:  # the last round has no verifier turn
            return self._end()
        self.next_agent = VERIFIER
        msg = f"{VERIFIER_RULES}\nProblem: {self.problem}\nSolution: {self.solution}"
        return StepResult([{"role": "user", "content": msg}], anchor=(self.round, VERIFIER),
                          info={"agent": VERIFIER, "success": False})  # fmt: skip

    def _verifier(self, action: Action) -> StepResult:
        m = _VERDICT.search(action.text)
        if m is not None and m.group(1).lower() == "approve":
            return self._end()
        self.round += 1
        self.next_agent = SOLVER
        msg = f"The verifier rejected your answer. {SOLVER_RULES}\n{self.problem}"
        return StepResult([{"role": "user", "content": msg}], anchor=(self.round, SOLVER),
                          info={"agent": SOLVER, "valid": m is not None, "success": False})  # fmt: skip

    def fork(self) -> SolverVerifierEnv:
        """A copy of the live episode (every field is immutable)."""
        return copy.copy(self)

    def close(self) -> None:
        pass
