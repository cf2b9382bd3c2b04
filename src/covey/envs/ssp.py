"""`ssp`: Search Self-Play, a proposer and a solver of one policy over the `search_qa` corpus.

Paper: "Search Self-play: Pushing the Frontier of Agent Capability without Supervision" (SSP, arXiv
2510.18821). Checked against Alibaba-Quark/SSP b4797e1 (`quarl/trainer/ppo/ssp_ray_trainer.py`
`_compute_proposer_rewards`, `quarl/utils/problem_extraction.py` `ProblemExtractor`,
`quarl/config/rl_config.yaml` self_play, `examples/train_ssp.sh`).

One game per item: the item's ``answer`` is the seed. The proposer (role 0) searches the corpus with the
`search` tool (covey.envs.search) and then writes a question whose answer is the seed, inside
``<question>...</question>``. The question is kept only when it can be verified (`_is_valid_search_question`):
it has at least `min_words` words (10) and 10 characters, does not contain the answer, the proposer's
searches returned material, it searched `min_searches` (2) different queries, none twice, and the RAG
check answers it from the proposer's retrieved documents alone. A question that fails any check ends
the game: the proposer gets `format_penalty` (-1.0, the config's default; the training script passes 0)
and no solver plays. A kept question is played by `n_solvers` (5, the script's rollout.n) solver
conversations in turn (each a thread of role 1 in group "game": the attempts at one question form a GRPO
group), each with the search tool: a reply without a tool call is its answer, reward 1.0 for Search-R1's
exact match with the seed, 0.0 otherwise (`max_calls` searches, then it must answer: a further search scores 0; the proposer's, no question). The
proposer then gets ``1 - success rate`` (reward_type 1-acc, the default) or, with
intermediate_difficulty, ``4 (left + s)(right - s)`` for 0 < s < 1 and 0 otherwise.

RAG check: the code asks an external LLM judge to answer the question from the materials
(`_validate_with_external_llm`, then exact match or an LLM match). covey's default `reader` answers it
without a model, for the generated corpus ("X is a country. Its capital is Y. ..."): among the retrieved
documents, the first whose facts the question names; the fact asked is the country when the question
starts with "which country" / "what country", else the one fact whose keyword ("capital", "river",
"year"/"founded"/"when") the question has and whose value it does not; the answer is that value (None
when no document or not exactly one fact fits). `rag_check: none` skips the check; an import path
``module:function(question, materials) -> answer`` plugs in another reader. Not built: the code's
replacement of a failed question by a reused one (its `extraction_failure: reuse`) and noisy materials.
"""

from __future__ import annotations

import copy
import re

from covey.envs.base import Action, StepResult, register_env
from covey.envs.search import SEARCH_SCHEMA, SYSTEM, Index, exact_match, index_for, normalize_answer
from covey.envs.tools import answer_tool_calls
from covey.registry import import_object

__all__ = ["SearchSelfPlayEnv", "proposer_reward", "read_generated", "valid_question"]

PROPOSER, SOLVER = 0, 1
PROPOSE = ("The answer is: {answer}. Search the encyclopedia for facts about it, then write a question whose only "
           "correct answer is {answer}, without the answer in it. Reply with the question inside <question>...</question>.")  # fmt: skip
_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_DOC = re.compile(r"(\w+) is a country\. Its capital is (\w+)\. It was founded in (\d+)\. The river (\w+) flows through it\.")
_KEYWORDS = {"capital": ("capital",), "river": ("river",), "founded": ("year", "founded", "when")}


def read_generated(question: str, materials: list[str]) -> str | None:
    """The `reader` RAG check for the generated corpus (module docstring).

    >>> docs = ["Zorvia is a country. Its capital is Quelmar. It was founded in 1642. The river Osk flows through it."]
    >>> read_generated("Which country has the capital Quelmar and the river Osk?", docs)
    'Zorvia'
    >>> read_generated("In what year was the country with the capital Quelmar founded?", docs)
    '1642'
    """
    q = question.lower()
    words = set(re.findall(r"\w+", q))
    for text in materials:
        for name, capital, founded, river in _DOC.findall(text):
            facts = {"name": name, "capital": capital, "founded": founded, "river": river}
            if not any(v.lower() in words for v in facts.values()):
                continue
            if q.startswith(("which country", "what country")):
                asked = ["name"]
            else:
                asked = [f for f, keys in _KEYWORDS.items() if f != "name" and any(k in words for k in keys)
                         and facts[f].lower() not in words]  # fmt: skip
            if len(asked) == 1:
                return facts[asked[0]]
    return None


def valid_question(question: str | None, answer: str, materials: list[str], queries: list[str], *, min_words: int,
                   min_searches: int, rag) -> str | None:  # fmt: skip
    """Why the proposed question cannot be kept (`ProblemExtractor._is_valid_search_question`), or None."""
    if question is None:
        return "no <question> block"
    text = question.strip()
    if len(text) < 10 or len(text) > 1000 or len(text.split(" ")) < min_words:
        return f"a question of 10 to 1000 characters and at least {min_words} words"
    if answer.lower() in text.lower():
        return "the answer is in the question"
    if not materials:
        return "no search material"
    if len(queries) < min_searches or len(queries) != len(set(queries)):
        return f"{min_searches} different searches or more, none repeated"
    if rag is not None:
        got = rag(text, materials)
        if got is None or normalize_answer(str(got)) != normalize_answer(answer):
            return "the RAG check does not answer it from the proposer's documents"
    return None


def proposer_reward(successes: list[float], reward_type: str = "1-acc", left: float = 0.0, right: float = 1.0) -> float:
    """`_compute_proposer_rewards` for one question: s = the share of solver attempts with reward > 0;
    1-acc: 1 - s; intermediate_difficulty: 4 (left + s)(right - s) when 0 < s < 1, else 0.

    >>> proposer_reward([1.0, 0.0, 0.0, 0.0]), proposer_reward([1.0, 0.0], "intermediate_difficulty")
    (0.75, 1.0)
    """
    s = sum(x > 0 for x in successes) / len(successes)
    if reward_type == "intermediate_difficulty":
        return 4.0 * (left + s) * (right - s) if 0 < s < 1 else 0.0
    return 1.0 - s


def _rag(spec: str):
    if spec == "none":
        return None
    if spec == "reader":
        return read_generated
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"ssp rag_check must be reader, none or an import path 'module:function', got {spec!r}")
    return import_object(spec, "ssp rag_check")


@register_env("ssp")
class SearchSelfPlayEnv:
    """The proposer (role 0) writes a verified search question for the item's answer; `n_solvers` solver
    attempts (role 1) answer it with search."""

    roles = ("proposer", "solver")
    tools = [SEARCH_SCHEMA]

    def __init__(self, *, corpus: str | None = None, k: int = 3, max_calls: int = 3, n_solvers: int = 5,
                 min_searches: int = 2, min_words: int = 10, rag_check: str = "reader", format_penalty: float = -1.0,
                 reward_type: str = "1-acc", left: float = 0.0, right: float = 1.0):  # fmt: skip
        if k < 1 or max_calls < 1 or n_solvers < 1 or min_searches < 0 or min_words < 1:
            raise ValueError(f"ssp: need k, max_calls, n_solvers, min_words >= 1 and min_searches >= 0 (got {k}, "
                             f"{max_calls}, {n_solvers}, {min_words}, {min_searches})")  # fmt: skip
        if reward_type not in ("1-acc", "intermediate_difficulty"):
            raise ValueError(f"ssp reward_type must be 1-acc or intermediate_difficulty, got {reward_type!r}")
        if corpus is not None:
            index_for(corpus)
        else:
            Index.check_installed()
        self.corpus, self.k, self.max_calls, self.n_solvers = corpus, k, max_calls, n_solvers
        self.min_searches, self.min_words, self.rag = min_searches, min_words, _rag(rag_check)
        self.penalty, self.reward_type, self.left, self.right = format_penalty, reward_type, left, right
        self.index: Index | None = None
        self.answer, self.question = "", ""
        self.materials: list[str] = []
        self.queries: list[str] = []
        self.solver, self.calls = -1, 0  # the solver attempt playing (-1: the proposer's turn)
        self.successes: list[float] = []

    def reset(self, item: dict, *, seed: int) -> StepResult:
        corpus = self.corpus or item.get("corpus")
        if not corpus or "answer" not in item:
            raise ValueError("ssp needs items with an 'answer' (the seed) and a corpus (env corpus: or the item's 'corpus')")
        self.index, self.answer = index_for(corpus), str(item["answer"])
        self.question, self.materials, self.queries, self.solver, self.calls, self.successes = "", [], [], -1, 0, []
        return StepResult([{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROPOSE.format(answer=self.answer)}],
                          anchor=("proposer", 0), info={"agent": PROPOSER})  # fmt: skip

    def step(self, action: Action) -> StepResult:
        if action.tool_calls:
            return self._search(action)
        if self.solver < 0:
            return self._propose(action.text)
        return self._answer(exact_match(action.text, self.answer))

    def _search(self, action: Action) -> StepResult:
        self.calls += 1
        if self.calls > self.max_calls:  # a search past `max_calls`: the proposer wrote no question, the attempt failed
            return self._reject({"rejected": "no question within max_calls searches"}) if self.solver < 0 else self._answer(False)
        out, info = answer_tool_calls(action.tool_calls, "search", self._run_search, 'search needs {"query": "<keywords>"}')
        agent, thread = (PROPOSER, "proposer") if self.solver < 0 else (SOLVER, f"solver:{self.solver}")
        return StepResult(out, 0.0, anchor=(thread, self.calls), info={**info, "agent": agent, "thread": thread})

    def _run_search(self, arguments: dict) -> str | None:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return None
        hits = self.index.search(query, self.k)
        if self.solver < 0:
            self.queries.append(query.strip())
            self.materials += hits
        return "\n".join(f"[{i + 1}] {t}" for i, t in enumerate(hits)) if hits else "no results"

    def _propose(self, text: str) -> StepResult:
        m = _QUESTION.search(text)
        question = m.group(1).strip() if m else None
        why = valid_question(question, self.answer, self.materials, self.queries, min_words=self.min_words,
                             min_searches=self.min_searches, rag=self.rag)  # fmt: skip
        if why is not None:
            return self._reject({"rejected": why})
        self.question = question
        return self._next_solver(0.0, {"valid": True})

    def _reject(self, info: dict) -> StepResult:
        return StepResult([], self.penalty, terminated=True, anchor=("proposer", -1),
                          info={**info, "agent": PROPOSER, "success": False, "valid": False})  # fmt: skip

    def _answer(self, ok: bool, info: dict | None = None) -> StepResult:
        self.successes.append(1.0 if ok else 0.0)
        return self._next_solver(1.0 if ok else 0.0, {**(info or {}), "success": ok})

    def _next_solver(self, reward: float, info: dict) -> StepResult:
        """The next solver attempt opens (the question alone, in a new conversation), or the game ends and
        the proposer is paid by the attempts' success rate."""
        if self.solver + 1 < self.n_solvers:
            self.solver, self.calls = self.solver + 1, 0
            thread = f"solver:{self.solver}"
            return StepResult([{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.question}], reward,
                              anchor=(thread, 0), info={**info, "agent": SOLVER, "thread": thread, "group": "game"})  # fmt: skip
        paid = proposer_reward(self.successes, self.reward_type, self.left, self.right)
        return StepResult([], reward, terminated=True, anchor=("end", 0),
                          info={**info, "agent": SOLVER, "rewards": {"proposer": paid}})  # fmt: skip

    def fork(self) -> SearchSelfPlayEnv:
        """A copy of the live game (the read-only index stays shared)."""
        new = copy.copy(self)
        new.materials, new.queries, new.successes = list(self.materials), list(self.queries), list(self.successes)
        return new

    def close(self) -> None:
        pass
