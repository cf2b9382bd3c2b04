"""`skill_library`: arithmetic word problems with a calculator and a library of skills the agent writes and
reuses (SAGE, arXiv 2512.17102: skills made in one task are available in the next task of a chain).

A skill is a named arithmetic formula over named parameters, ``perimeter(a, b) = 2*(a+b)``. Tools:

    calculator(expression)                 the value of an arithmetic expression (`covey.envs.tools.calculate`)
    save_skill(name, params, expression)   adds a skill to the library (it must evaluate once every
                                           parameter is 1; at most `max_skills` skills)
    use_skill(name, args)                  the value of a skill at {param: number}

A turn without a tool call is the final answer (its last number; reward 1.0 when it equals the item's
answer, else 0.0, terminated); `max_calls` tool turns, then truncated. The library comes in with the
item (``item["skill_library"]``: {name: {"params": [...], "expression": ...}}, shown in the system
message) and every step reports, as columns for the reward (``info["columns"]``): `skills_after` (the
library now), `skills_made` (names saved in this episode) and `skills_used` (names of skills that came
in with the item and were used without error). Formulas are evaluated by substituting numbers for the
parameters and calling the calculator: nothing reaches eval.
"""

from __future__ import annotations

import copy
import re

from covey.envs.base import Action, StepResult, register_env
from covey.envs.tools import CALCULATOR_SCHEMA, calculate, tool_message
from covey.rewards.math import extract_answer, math_equal

__all__ = ["SAVE_SKILL_SCHEMA", "SkillLibraryEnv", "USE_SKILL_SCHEMA", "check_skill", "run_skill"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_PARAMS = 6

SAVE_SKILL_SCHEMA = {"type": "function", "function": {
    "name": "save_skill", "description": "Save a reusable formula: a name, its parameters and an arithmetic expression over them.",
    "parameters": {"type": "object", "properties": {
        "name": {"type": "string"}, "params": {"type": "array", "items": {"type": "string"}},
        "expression": {"type": "string", "description": "e.g. 2*(a+b)"}}, "required": ["name", "params", "expression"]}}}  # fmt: skip
USE_SKILL_SCHEMA = {"type": "function", "function": {
    "name": "use_skill", "description": "Evaluate a saved skill at given parameter values.",
    "parameters": {"type": "object", "properties": {
        "name": {"type": "string"}, "args": {"type": "object", "description": "e.g. {\"a\": 3, \"b\": 4}"}},
        "required": ["name", "args"]}}}  # fmt: skip
SYSTEM = ("Solve the problem. Tools: calculator(expression); save_skill(name, params, expression) to keep a formula for "
          "later problems; use_skill(name, args) to apply a saved one. Call a tool as "
          '<tool_call>{"name": "use_skill", "arguments": {"name": "perimeter", "args": {"a": 3, "b": 4}}}</tool_call>. '
          "When you know the answer, reply with the number only.\nSaved skills:\n{skills}")  # fmt: skip


def _substitute(expression: str, values: dict[str, float]) -> str:
    return _WORD.sub(lambda m: f"({values[m.group(0)]!r})" if m.group(0) in values else m.group(0), expression)


def check_skill(name, params, expression) -> str | None:
    """Why a skill definition is refused, or None when it is a valid one.

    >>> check_skill("perimeter", ["a", "b"], "2*(a+b)"), check_skill("p", ["a"], "a + c")
    (None, "the expression uses 'c', which is not a parameter")
    """
    if not isinstance(name, str) or not _NAME.match(name):
        return "a skill name is a word of at most 32 letters, digits or _"
    if not isinstance(params, list) or len(params) > MAX_PARAMS or not all(isinstance(p, str) and _NAME.match(p) for p in params):
        return f"params must be a list of at most {MAX_PARAMS} parameter names"
    if len(set(params)) != len(params):
        return "params must be distinct"
    if not isinstance(expression, str) or not expression.strip():
        return "the expression must be a non-empty string"
    unknown = [w for w in _WORD.findall(expression) if w not in params]
    if unknown:
        return f"the expression uses {unknown[0]!r}, which is not a parameter"
    probe = calculate(_substitute(expression, dict.fromkeys(params, 1)))
    return probe[len("error: "):] if probe.startswith("error:") else None


def run_skill(skill: dict, args) -> str:
    """The skill's value at `args` ({param: number}) as text, or ``"error: ..."``."""
    params = skill["params"]
    if not isinstance(args, dict) or set(args) != set(params):
        return f"error: args must give exactly the parameters {params}"
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values()):
        return "error: every argument must be a number"
    return calculate(_substitute(skill["expression"], {k: args[k] for k in params}))


@register_env("skill_library")
class SkillLibraryEnv:
    """Arithmetic with a calculator and a skill library (module docstring)."""

    tools = [CALCULATOR_SCHEMA, SAVE_SKILL_SCHEMA, USE_SKILL_SCHEMA]

    def __init__(self, *, max_calls: int = 4, max_skills: int = 8):
        if max_calls < 1 or max_skills < 1:
            raise ValueError(f"skill_library: need max_calls >= 1 and max_skills >= 1, got {max_calls}, {max_skills}")
        self.max_calls, self.max_skills = max_calls, max_skills
        self.answer, self.calls = "", 0
        self.library: dict[str, dict] = {}
        self.inherited: set[str] = set()
        self.made: list[str] = []
        self.used: list[str] = []

    def reset(self, item: dict, *, seed: int) -> StepResult:
        if "answer" not in item:
            raise ValueError(f"skill_library needs items with an 'answer' (item {item.get('id')} has none)")
        library = item.get("skill_library") or {}
        for name, s in library.items():
            why = check_skill(name, s.get("params") if isinstance(s, dict) else None, s.get("expression") if isinstance(s, dict) else None)
            if why is not None:
                raise ValueError(f"skill_library: the item's skill {name!r} is not valid: {why}")
        self.answer, self.calls = str(item["answer"]), 0
        self.library = copy.deepcopy(dict(library))
        self.inherited, self.made, self.used = set(self.library), [], []
        shown = "\n".join(f"{n}({', '.join(s['params'])}) = {s['expression']}" for n, s in self.library.items()) or "none"
        prompt = item["prompt"]
        user = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return StepResult([{"role": "system", "content": SYSTEM.replace("{skills}", shown)}, *user], anchor=0,
                          info={"columns": self._columns()})  # fmt: skip

    def step(self, action: Action) -> StepResult:
        if not action.tool_calls:
            ok = math_equal(extract_answer(action.text, order=["last_number"]), self.answer)
            return StepResult([], 1.0 if ok else 0.0, terminated=True, anchor=self.calls,
                              info={"success": ok, "columns": self._columns()})  # fmt: skip
        self.calls += 1
        out, errors = [], 0
        for call in action.tool_calls:
            result = f"error: {call.error}" if call.error is not None else self._call(call.name, call.arguments)
            errors += result.startswith("error:")
            out.append(tool_message(result))
        info = {"valid": any(c.error is None for c in action.tool_calls), "tool_calls": len(action.tool_calls),
                "tool_errors": errors, "success": False, "columns": self._columns()}  # fmt: skip
        return StepResult(out, 0.0, truncated=self.calls >= self.max_calls, anchor=self.calls, info=info)

    def _call(self, name: str, arguments: dict) -> str:
        if name == "calculator":
            expression = arguments.get("expression")
            return calculate(expression) if isinstance(expression, str) else 'error: the calculator needs {"expression": ...}'
        if name == "save_skill":
            skill_name, params, expression = arguments.get("name"), arguments.get("params"), arguments.get("expression")
            why = check_skill(skill_name, params, expression)
            if why is None and skill_name not in self.library and len(self.library) >= self.max_skills:
                why = f"the library is full ({self.max_skills} skills)"
            if why is not None:
                return f"error: {why}"
            self.library[skill_name] = {"params": list(params), "expression": expression}
            self.inherited.discard(skill_name)  # rewritten here: no longer the earlier task's skill
            self.made.append(skill_name)
            return f"saved {skill_name}({', '.join(params)})"
        if name == "use_skill":
            skill = self.library.get(arguments.get("name"))
            if skill is None:
                return f"error: no skill {arguments.get('name')!r}; saved: {', '.join(self.library) or 'none'}"
            result = run_skill(skill, arguments.get("args"))
            if not result.startswith("error:") and arguments["name"] in self.inherited:
                self.used.append(arguments["name"])
            return result
        return f"error: unknown tool {name!r}; tools are calculator, save_skill, use_skill"

    def _columns(self) -> dict:
        return {"skills_after": copy.deepcopy(self.library), "skills_made": list(dict.fromkeys(self.made)),
                "skills_used": list(dict.fromkeys(self.used))}  # fmt: skip

    def fork(self) -> SkillLibraryEnv:
        twin = copy.copy(self)
        twin.library, twin.inherited = copy.deepcopy(self.library), set(self.inherited)
        twin.made, twin.used = list(self.made), list(self.used)
        return twin

    def close(self) -> None:
        pass
