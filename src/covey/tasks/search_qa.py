"""The `search_qa` task: questions about one fact of one country of a generated corpus, verified by the
answer as a whole word; the environment that lets the model search the corpus is `covey.envs.search`."""

from __future__ import annotations

import json
import random

from covey.envs.search import FACTS, QUESTIONS, exact_match, make_corpus
from covey.tasks._common import check_split
from covey.tasks.registry import register_task

__all__ = ["SearchQATask"]


@register_task("search_qa")
class SearchQATask:
    """Questions about a generated corpus ``{"id", "prompt", "answer", "corpus", "entities"}``: one fact
    (capital, founding year, river) of one country each; train and test take different questions.
    `entities` are the question's gold entities, the country and the answer (E-GRPO's entity reward,
    `entity_match`, counts how many of them an episode retrieved or named). The verifier
    is Search-R1's exact match (`exact_match`). Params: n_entities, seed, n_train, n_test."""

    name = "search_qa"
    answer_format = "The answer alone (a name or a year), or in <answer>...</answer>."

    def __init__(self, *, n_entities: int = 200, seed: int = 0, n_train: int = 128, n_test: int = 64):
        if n_entities < 2 or n_train < 1 or n_test < 0 or n_train + n_test > 3 * n_entities:
            raise ValueError(f"search_qa: need n_entities >= 2, n_train >= 1, n_test >= 0 and n_train + n_test <= "
                             f"3 * n_entities (got {n_entities}, {n_train}, {n_test})")  # fmt: skip
        self.n, self.seed, self.sizes = n_entities, seed, {"train": n_train, "test": n_test}

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        docs = make_corpus(self.n, self.seed)
        pairs = [(d, f) for d in docs for f in FACTS]
        random.Random(self.seed + 1).shuffle(pairs)
        start = 0 if split == "train" else self.sizes["train"]
        corpus = f"generated:{self.n}:{self.seed}"
        return [{"id": i, "prompt": QUESTIONS[f].format(d["name"]), "answer": d[f], "corpus": corpus,
                 "entities": [d["name"], d[f]]}
                for i, (d, f) in enumerate(pairs[start : start + self.sizes[split]])]  # fmt: skip

    def demonstration(self, item: dict) -> str:
        """The first turn of a good episode: a search for the question's words (for `covey sft`)."""
        query = item["prompt"].rstrip("?")
        return '<tool_call>{"name": "search", "arguments": {"query": ' + json.dumps(query) + "}}</tool_call>"

    def reward(self, prompts, completions, answer, **_) -> list[float]:
        return [1.0 if exact_match(c if isinstance(c, str) else c[-1]["content"], a) else 0.0
                for c, a in zip(completions, answer)]  # fmt: skip
