"""Search over a local corpus: the `search` tool (BM25 via `bm25s`) and the `search_qa` environment (its
task, questions about the corpus: `covey.tasks.search_qa`).

Optional extra: ``pip install covey[search]`` (bm25s pinned in pyproject.toml). No network: the
corpus is generated (``generated:N:SEED``, made by `make_corpus`) or read from a local JSONL file
(one ``{"text": ...}`` per line).

The generated corpus describes N invented countries (names from seeded syllables, so no model knows
them), one document each: "Zorvia is a country. Its capital is Quelmar. It was founded in 1642. The
river Osk flows through it." The `search_qa` task asks about one fact of one country (capital,
founding year or river); only a search finds the answer.

    task: {name: search_qa, params: {n_entities: 200, seed: 0}}
    env: {name: search_qa, k: 3, max_calls: 3}

Each turn the model either calls ``<tool_call>{"name": "search", "arguments": {"query": "capital of
Zorvia"}}</tool_call>`` and gets the `k` best documents (BM25 over lower-cased words, English stop
words removed) as a tool message, or answers: a turn without a tool call is the final answer, reward
1.0 when it is the item's answer by Search-R1's exact match, else 0.0, terminated. Malformed calls,
unknown tools and bad arguments come back as tool errors (counted); `max_calls` tool turns, then
truncated. The anchor is the number of tool calls made (the state without history). Every step
reports the documents the episode has retrieved so far, in order and without repeats, as the column
``retrieved`` (``info["columns"]``): with ``rollout.strategy: {name: episodes, rewards: functions}`` a reward
reads it (E-GRPO's `entity_match` with ``evidence_column: retrieved`` counts the gold entities they name).

Exact match (`exact_match`), as Search-R1's ``qa_em.py`` (PeterGriffinJin/Search-R1 a14dc3a,
verl/utils/reward_score/qa_em.py: `normalize_answer`, `em_check`): the answer is the last
``<answer>...</answer>`` of the turn if it has one, else the whole turn (covey's prompt asks for the
answer alone, Search-R1's for the tag); both sides lower-cased, punctuation and the articles a / an / the
removed, spaces collapsed; equal -> 1.0. The answer is as long as the gold one: a reply that repeats a
retrieved document (which holds the answer and the country's other facts) is not an answer. The former
rule, the gold answer as a whole word anywhere in the reply, scored such an echo 1.0 (on 30 of 30 questions
in tests/envs/test_search.py). Search-R1 only scores a reply with two or more <answer> tags (its prompt shows
one); covey takes the last tag, or the whole reply.
"""

from __future__ import annotations

import copy
import json
import random
import re
import string
import threading
from functools import lru_cache
from pathlib import Path

from covey.envs.base import Action, MissingExtra, StepResult, register_env
from covey.envs.tools import answer_tool_calls

__all__ = ["FACTS", "QUESTIONS", "SEARCH_SCHEMA", "Index", "SearchQAEnv", "exact_match", "index_for", "make_corpus",
           "normalize_answer"]

SEARCH_SCHEMA = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the local encyclopedia; returns the best matching documents.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "keywords, e.g. capital of Zorvia"}},
            "required": ["query"],
        },
    },
}

SYSTEM = ("You can search an encyclopedia. To search, write "
          '<tool_call>{"name": "search", "arguments": {"query": "capital of Zorvia"}}</tool_call> '
          "and wait for the results. When you know the answer, reply with the answer only.")  # fmt: skip

_SYLLABLES = ["zor", "vi", "quel", "mar", "osk", "tan", "bre", "lo", "dun", "ka", "sel", "ri", "mo", "gath",
              "en", "pul", "ta", "vek", "ny", "ar", "shi", "bo", "cre", "im"]  # fmt: skip
FACTS = ("capital", "founded", "river")
QUESTIONS = {"capital": "What is the capital of {}?", "founded": "In what year was {} founded?",
             "river": "Which river flows through {}?"}  # fmt: skip


def _name(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def make_corpus(n: int, seed: int) -> list[dict]:
    """N invented countries ``{"name", "capital", "founded", "river", "text"}`` (distinct names), seeded."""
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        name, capital, river = _name(rng, 3), _name(rng, 2), _name(rng, 2)
        if {name, capital, river} & seen or len({name, capital, river}) < 3:
            continue
        seen |= {name, capital, river}
        founded = str(rng.randint(800, 1999))
        text = f"{name} is a country. Its capital is {capital}. It was founded in {founded}. The river {river} flows through it."
        out.append({"name": name, "capital": capital, "founded": founded, "river": river, "text": text})
    return out


class Index:
    """BM25 (bm25s, Lucene variant, k1 1.5, b 0.75) over a list of document texts."""

    @staticmethod
    def check_installed():
        try:
            import bm25s
        except ImportError:
            raise MissingExtra("search needs the bm25s package: pip install 'covey[search]'") from None
        return bm25s

    def __init__(self, texts: list[str]):
        bm25s = self.check_installed()
        if not texts:
            raise ValueError("search: the corpus is empty")
        self.bm25s, self.texts = bm25s, list(texts)
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(self.texts, stopwords="en", show_progress=False), show_progress=False)
        self.lock = threading.Lock()  # episodes search from several threads

    def search(self, query: str, k: int) -> list[str]:
        """The `k` best documents for `query`, best first (fewer when fewer match a word)."""
        tokens = self.bm25s.tokenize([query], stopwords="en", show_progress=False)
        with self.lock:
            docs, scores = self.retriever.retrieve(tokens, k=min(k, len(self.texts)), show_progress=False)
        return [self.texts[int(d)] for d, s in zip(docs[0], scores[0]) if s > 0]


_INDEX_LOCK = threading.Lock()


@lru_cache(maxsize=8)
def _index(corpus: str) -> Index:
    return Index(corpus_texts(corpus))


def index_for(corpus: str) -> Index:
    """The (cached) index of a corpus spec: ``generated:N:SEED`` or a JSONL path."""
    with _INDEX_LOCK:
        return _index(corpus)


def corpus_texts(corpus: str) -> list[str]:
    m = re.fullmatch(r"generated:(\d+):(-?\d+)", corpus)
    if m:
        return [d["text"] for d in make_corpus(int(m.group(1)), int(m.group(2)))]
    path = Path(corpus)
    if not path.is_file():
        raise ValueError(f"search corpus must be 'generated:N:SEED' or a JSONL file of {{\"text\": ...}} lines, got {corpus!r}")
    texts = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            doc = json.loads(line)
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                raise ValueError(f"{corpus} line {i + 1}: expected {{\"text\": str}}")
            texts.append(doc["text"])
    return texts


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Search-R1's `normalize_answer`: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("  The River  Osk. ")
    'river osk'
    """
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(reply: str, answer: str) -> bool:
    """Search-R1's exact match of a final reply (its last ``<answer>`` block if any) against the gold answer.

    >>> exact_match("Quelmar.", "Quelmar"), exact_match("<answer>the Osk</answer>", "Osk")
    (True, True)
    >>> exact_match("Zorvia is a country. Its capital is Quelmar. It was founded in 1642.", "Quelmar")
    False
    """
    tags = _ANSWER_TAG.findall(reply)
    return normalize_answer(tags[-1] if tags else reply) == normalize_answer(answer)


@register_env("search_qa")
class SearchQAEnv:
    """Question answering with a `search` tool over a local corpus (the item's ``corpus``, or `corpus`)."""

    tools = [SEARCH_SCHEMA]

    def __init__(self, *, corpus: str | None = None, k: int = 3, max_calls: int = 3, system_prompt: str = SYSTEM):
        if k < 1 or max_calls < 1:
            raise ValueError(f"search_qa: need k >= 1 and max_calls >= 1, got {k}, {max_calls}")
        if corpus is not None:
            index_for(corpus)  # a bad corpus (or no bm25s) fails when the config is read
        else:
            Index.check_installed()
        self.corpus, self.k, self.max_calls, self.system_prompt = corpus, k, max_calls, system_prompt
        self.index: Index | None = None
        self.answer, self.calls = "", 0
        self.retrieved: list[str] = []  # the documents the episode retrieved, in order, without repeats

    def reset(self, item: dict, *, seed: int) -> StepResult:
        corpus = self.corpus or item.get("corpus")
        if not corpus or "answer" not in item:
            raise ValueError("search_qa needs items with an 'answer' and a corpus (env corpus: or the item's 'corpus')")
        self.index, self.answer, self.calls, self.retrieved = index_for(corpus), str(item["answer"]), 0, []
        prompt = item["prompt"]
        user = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return StepResult([{"role": "system", "content": self.system_prompt}, *user], anchor=0,
                          info={"columns": {"retrieved": []}})

    def step(self, action: Action) -> StepResult:
        if not action.tool_calls:
            ok = exact_match(action.text, self.answer)
            return StepResult([], 1.0 if ok else 0.0, terminated=True, anchor=self.calls,
                              info={"success": ok, "columns": {"retrieved": list(self.retrieved)}})
        self.calls += 1
        out, info = answer_tool_calls(action.tool_calls, "search", self._search, 'search needs {"query": "<keywords>"}')
        info["columns"] = {"retrieved": list(self.retrieved)}
        return StepResult(out, 0.0, truncated=self.calls >= self.max_calls, anchor=self.calls, info=info)

    def fork(self) -> SearchQAEnv:
        """A copy of the live episode; the (read-only) index stays shared."""
        twin = copy.copy(self)
        twin.retrieved = list(self.retrieved)
        return twin

    def _search(self, arguments: dict) -> str | None:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return None
        hits = self.index.search(query, self.k)
        self.retrieved += [t for t in hits if t not in self.retrieved]
        return "\n".join(f"[{i + 1}] {t}" for i, t in enumerate(hits)) if hits else "no results"

    def close(self) -> None:
        pass
