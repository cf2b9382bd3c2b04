"""`planner_executor`: M-GRPO's vertical two-agent system, a main agent (planner) and sub-agents (multi-turn
tool executors), over the `search_qa` corpus; one policy plays both (covey.envs.roles).

Paper: "Multi-Agent Deep Research: Training Multi-Agent Systems with M-GRPO" (arXiv 2511.13288). Checked
against AQ-MedAI/MrlX 82aabc0 (`MrlX-DeepResearch/agent_co_train`: `main_agent_multiturn.py`
`reward_func`, `main_agent_reward.py` `compute_score_em` and `_validate_assistant_turn`,
`sub_agent_multiturn.py` `reward_func`, `sub_agent_reward.py` `compute_format_score`).

The main agent (role 0) answers the item's question. It cannot search; it delegates with the
``delegate`` tool (``{"task": "..."}``), which opens a new sub-agent conversation (role 1, thread
``sub:<i>``) that gets the task alone and searches with the ``search`` tool (covey.envs.search) until
it replies without a tool call; its ``<result>`` block (or the whole reply) goes back to the main agent
as the delegate call's tool message. `max_delegations` (3) sub-agents per game, `max_calls` (3) searches
per sub-agent (a further search ends it with "no result"). A main turn without a tool call is the final
answer. Rewards, at the end of the game:

    main (format_score 0.1):  0 when a main turn breaks the format, 1.0 when the last <result> is the
                              answer (Search-R1 exact match; the code then asks an LLM judge, not built),
                              0.1 otherwise
    each sub-agent:           0 when one of its turns breaks the format; else 0.1 when the main reward is
                              0 or 0.1 (the code: format x 0.1, or the main's 0.1), 1.0 when it is 1

The format (`_validate_assistant_turn`): an optional ``<thinking>...</thinking>``, then either one
``<tool_call>...</tool_call>`` or (after thinking) ``<result>...</result>``, no text outside the tags, each
tag balanced; a conversation is well formed when every turn is and its last has the ``<result>``.
The two levels of group-relative advantages are the `selfplay` strategy's groups (the main agents of
the item's G games; their sub-agents) with `grpo`; `thread_slots: {sub: D}` is the trajectory alignment.
"""

from __future__ import annotations

import copy
import re

from covey.envs.base import Action, StepResult, register_env
from covey.envs.search import SEARCH_SCHEMA, Index, exact_match, index_for
from covey.envs.tools import answer_tool_calls, tool_message

__all__ = ["DELEGATE_SCHEMA", "PlannerExecutorEnv", "main_reward", "sub_reward", "turn_well_formed"]

MAIN, SUB = 0, 1
DELEGATE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "delegate",
        "description": "Give a subtask to a sub-agent that can search the encyclopedia; returns its result.",
        "parameters": {"type": "object", "properties": {"task": {"type": "string", "description": "the subtask"}},
                       "required": ["task"]},
    },
}  # fmt: skip
MAIN_SYSTEM = ("You are the main agent. You cannot search; to get facts, delegate: <thinking>...</thinking>"
               '<tool_call>{"name": "delegate", "arguments": {"task": "find the capital of Zorvia"}}</tool_call>. '
               "When you know the answer, reply <thinking>...</thinking><result>the answer</result>.")  # fmt: skip
SUB_SYSTEM = ("You are a sub-agent with a search tool: <thinking>...</thinking>"
              '<tool_call>{"name": "search", "arguments": {"query": "capital of Zorvia"}}</tool_call>. '
              "When you are done, reply <thinking>...</thinking><result>what you found</result>.")  # fmt: skip
_TAG = re.compile(r"(</?(?:thinking|tool_call|result)>)")
_NEXT = {("start", "<thinking>"): "in_thinking", ("in_thinking", "</thinking>"): "after_thinking",
         ("start", "<tool_call>"): "in_tool_call", ("after_thinking", "<tool_call>"): "in_tool_call",
         ("in_tool_call", "</tool_call>"): "after_tool_call", ("after_thinking", "<result>"): "in_result",
         ("in_result", "</result>"): "end"}  # fmt: skip
_RESULT = re.compile(r"<result>(.*?)</result>", re.DOTALL)


def turn_well_formed(text: str) -> bool:
    """`_validate_assistant_turn`: balanced tags, then the state machine thinking -> tool_call | result,
    no text outside the tags, ending after a tool call or a result.

    >>> turn_well_formed("<thinking>look it up</thinking><tool_call>{}</tool_call>"), turn_well_formed("hi")
    (True, False)
    """
    for tag in ("thinking", "tool_call", "result"):
        if text.count(f"<{tag}>") != text.count(f"</{tag}>"):
            return False
    state = "start"
    for part in _TAG.split(text):
        if not part.strip():
            continue
        if _TAG.fullmatch(part):
            state = _NEXT.get((state, part), "bad")
            if state == "bad":
                return False
        elif state not in ("in_thinking", "in_tool_call", "in_result"):
            return False
    return state in ("after_tool_call", "end")


def main_reward(turns: list[str], answer: str, format_score: float = 0.1) -> float:
    """`compute_score_em` (format_score 0.1): 0 for a broken format, 1.0 for the right <result>, else 0.1."""
    if not turns or not all(turn_well_formed(t) for t in turns) or not _RESULT.search(turns[-1]):
        return 0.0
    return 1.0 if exact_match(_RESULT.findall(turns[-1])[-1], answer) else format_score


def sub_reward(turns: list[str], main: float) -> float:
    """`sub_agent_multiturn.reward_func`: 0 for a broken format, 0.1 when the main reward is 0 or 0.1, else 1.0."""
    if not turns or not all(turn_well_formed(t) for t in turns) or not _RESULT.search(turns[-1]):
        return 0.0
    return 0.1 if main in (0.0, 0.1) else 1.0


@register_env("planner_executor")
class PlannerExecutorEnv:
    """A main agent that delegates (role 0) and the sub-agents that search for it (role 1)."""

    roles = ("main", "sub")
    tools = [DELEGATE_SCHEMA, SEARCH_SCHEMA]

    def __init__(self, *, corpus: str | None = None, k: int = 3, max_calls: int = 3, max_delegations: int = 3,
                 format_score: float = 0.1):  # fmt: skip
        if k < 1 or max_calls < 1 or max_delegations < 1:
            raise ValueError(f"planner_executor: need k, max_calls and max_delegations >= 1, got {k}, {max_calls}, {max_delegations}")
        if corpus is not None:
            index_for(corpus)
        else:
            Index.check_installed()
        self.corpus, self.k, self.max_calls, self.max_delegations, self.format_score = corpus, k, max_calls, max_delegations, format_score
        self.index: Index | None = None
        self.answer = ""
        self.main_turns: list[str] = []
        self.sub_turns: list[list[str]] = []  # per sub-agent, its turns
        self.calls, self.in_sub = 0, False

    def reset(self, item: dict, *, seed: int) -> StepResult:
        corpus = self.corpus or item.get("corpus")
        if not corpus or "answer" not in item:
            raise ValueError("planner_executor needs items with an 'answer' and a corpus (env corpus: or the item's 'corpus')")
        self.index, self.answer, self.main_turns, self.sub_turns = index_for(corpus), str(item["answer"]), [], []
        self.calls, self.in_sub = 0, False
        prompt = item["prompt"] if isinstance(item["prompt"], str) else item["prompt"][-1]["content"]
        return StepResult([{"role": "system", "content": MAIN_SYSTEM}, {"role": "user", "content": prompt}],
                          anchor=("main", 0), info={"agent": MAIN})  # fmt: skip

    def step(self, action: Action) -> StepResult:
        return self._sub(action) if self.in_sub else self._main(action)

    def _main(self, action: Action) -> StepResult:
        self.main_turns.append(action.text)
        if not action.tool_calls:
            main = main_reward(self.main_turns, self.answer, self.format_score)
            subs = {f"sub:{i}": sub_reward(t, main) for i, t in enumerate(self.sub_turns)}
            return StepResult([], main, terminated=True, anchor=("end", len(self.main_turns)),
                              info={"agent": MAIN, "rewards": subs, "success": main == 1.0})  # fmt: skip
        call = action.tool_calls[0]  # one delegation per turn: the first call
        task = (call.arguments or {}).get("task")
        why = (call.error if call.error is not None else f"unknown tool {call.name!r}; the main agent's tool is 'delegate'"
               if call.name != "delegate" else 'delegate needs {"task": "<the subtask>"}'
               if not isinstance(task, str) or not task.strip() else f"at most {self.max_delegations} delegations"
               if len(self.sub_turns) >= self.max_delegations else None)  # fmt: skip
        if why is not None:
            return StepResult([tool_message(f"error: {why}")], 0.0, anchor=("main", len(self.main_turns)),
                              info={"agent": MAIN, "tool_calls": 1, "tool_errors": 1, "valid": call.error is None})  # fmt: skip
        self.sub_turns.append([])
        self.calls, self.in_sub = 0, True
        thread = f"sub:{len(self.sub_turns) - 1}"
        return StepResult([{"role": "system", "content": SUB_SYSTEM}, {"role": "user", "content": task.strip()}],
                          anchor=("sub", 0), info={"agent": SUB, "thread": thread, "tool_calls": 1, "tool_errors": 0})  # fmt: skip

    def _sub(self, action: Action) -> StepResult:
        self.sub_turns[-1].append(action.text)
        thread = f"sub:{len(self.sub_turns) - 1}"
        if action.tool_calls and self.calls < self.max_calls:
            self.calls += 1
            out, info = answer_tool_calls(action.tool_calls, "search", self._search, 'search needs {"query": "<keywords>"}')
            return StepResult(out, 0.0, anchor=("sub", self.calls), info={**info, "agent": SUB, "thread": thread})
        found = _RESULT.findall(action.text)
        result = found[-1].strip() if found else ("no result" if action.tool_calls else action.text.strip())
        self.in_sub = False  # back to the main agent
        return StepResult([tool_message(result or "no result")], 0.0, anchor=("main", len(self.main_turns)),
                          info={"agent": MAIN})  # fmt: skip

    def _search(self, arguments: dict) -> str | None:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return None
        hits = self.index.search(query, self.k)
        return "\n".join(f"[{i + 1}] {t}" for i, t in enumerate(hits)) if hits else "no results"

    def fork(self) -> PlannerExecutorEnv:
        new = copy.copy(self)
        new.main_turns, new.sub_turns = list(self.main_turns), [list(t) for t in self.sub_turns]
        return new

    def close(self) -> None:
        pass

