"""A mixture of tasks: several domains in one task, every item tagged with its `domain`.

The multi-domain data-mixing setup of "Can One Domain Help Others?" (arXiv 2507.17512, code read:
its `run.sh` concatenates the domains' training files and `verl/utils/reward_score/__init__.py`
dispatches the reward by each row's `data_source`): the train split is the concatenation of the
domains' train splits (optionally a fixed number of items per domain), and each completion is scored
by its own domain's verifier. Per-domain metrics: `covey eval --by domain`; the transfer matrix:
`covey compare matrix` (docs/studies.md).
"""

from __future__ import annotations

import random
from typing import Any

from covey.tasks._common import check_split
from covey.tasks.base import hooks_of
from covey.tasks.registry import get_task, register_task

__all__ = ["Mixture"]


@register_task("mixture")
class Mixture:
    """Several tasks as one: items from every domain, each scored by its own task's verifier.

    ``tasks`` maps a domain name to a task spec, ``{name: <registered task>, <its params>...}``
    (``{"arith": {"name": "arithmetic"}, "count": {"name": "countdown", "n_train": 500}}``), or is a
    list of task names (each is its own domain). Config form::

        task: {name: mixture, params: {tasks: {arith: {name: arithmetic}, count: {name: countdown}},
                                       per_domain: {train: 100, test: 50}}}

    A split is the concatenation of the domains' items, in the order `tasks` lists them, each item
    a copy with ``"domain"`` added and ``"domain_id"`` (its id in its own task); ``id`` runs over the
    mixture. `per_domain` (an int, or ``{"train": n, "test": m}``) keeps the first n items of each
    domain (all when absent); `shuffle` (default True for train, as the paper's concatenated and
    shuffled files) interleaves the train split with `seed`; the test split keeps domain order.

    Reward: the rows of each domain go to that domain's `reward` together (with their own columns),
    and the scores come back in row order. There is no `extract_answer` (a completion alone does not
    say its domain), so `covey eval` reports accuracy and pass@k for a mixture, not maj@k.
    """

    name = "mixture"

    def __init__(self, *, tasks, per_domain: int | dict | None = None, shuffle: bool = True, seed: int = 0):
        if isinstance(tasks, (list, tuple)):
            tasks = {str(t): {"name": t} for t in tasks}
        if not isinstance(tasks, dict) or not tasks:
            raise ValueError(f"tasks must be a non-empty mapping of domain -> task spec or a list of task names, got {tasks!r}")
        self.tasks: dict[str, Any] = {}
        for domain, spec in tasks.items():
            if isinstance(spec, str):
                spec = {"name": spec}
            if not isinstance(spec, dict) or "name" not in spec:
                raise ValueError(f"mixture domain {domain!r}: a task spec needs 'name', got {spec!r}")
            params = dict(spec.get("params", {}), **{k: v for k, v in spec.items() if k not in ("name", "params")})
            if spec["name"] == "mixture":
                raise ValueError(f"mixture domain {domain!r}: a mixture cannot contain a mixture")
            self.tasks[str(domain)] = get_task(spec["name"], **params)
        if isinstance(per_domain, int):
            per_domain = {"train": per_domain, "test": per_domain}
        per_domain = dict(per_domain or {})
        bad = [k for k, v in per_domain.items() if k not in ("train", "test") or isinstance(v, bool) or not isinstance(v, int) or v < 1]
        if bad:
            raise ValueError(f"per_domain must be a positive int or {{train: n, test: m}}, got {per_domain!r}")
        self.per_domain, self.shuffle, self.seed = per_domain, shuffle, seed
        self.answer_format = " | ".join(f"{d}: {getattr(t, 'answer_format', '?')}" for d, t in self.tasks.items())
        self._cache: dict[str, list[dict]] = {}

    @property
    def domains(self) -> list[str]:
        return list(self.tasks)

    def examples(self, split: str = "train") -> list[dict]:
        check_split(self.name, split)
        if split not in self._cache:
            items = []
            for domain, task in self.tasks.items():
                for item in list(task.examples(split))[: self.per_domain.get(split)]:
                    if "domain" in item or "domain_id" in item:
                        raise ValueError(f"mixture domain {domain!r}: its items already have a 'domain' or 'domain_id' key")
                    items.append({**item, "domain": domain, "domain_id": item["id"]})
            if split == "train" and self.shuffle:
                random.Random(f"covey-mixture-{self.seed}").shuffle(items)
            self._cache[split] = [{**item, "id": i} for i, item in enumerate(items)]
        return self._cache[split]

    def demonstration(self, item: dict) -> str:
        task = self.tasks[item["domain"]]
        demo = hooks_of(task).demonstration
        if demo is None:
            raise ValueError(f"mixture domain {item['domain']!r} ({task.name}) has no demonstration for SFT")
        return demo({**item, "id": item["domain_id"]})

    def reward(self, prompts, completions, domain, **columns) -> list[float | None]:
        if len(domain) != len(completions) or len(prompts) != len(completions):
            raise ValueError(f"got {len(prompts)} prompts, {len(completions)} completions, {len(domain)} domains")
        unknown = sorted({d for d in domain if d not in self.tasks})
        if unknown:
            raise ValueError(f"unknown mixture domain(s) {unknown}; this mixture has {self.domains}")
        out: list[float | None] = [None] * len(completions)
        for name, task in self.tasks.items():
            rows = [i for i, d in enumerate(domain) if d == name]
            if not rows:
                continue
            cols = {k: [v[i] for i in rows] for k, v in columns.items() if k != "domain_id"}
            scores = task.reward([prompts[i] for i in rows], [completions[i] for i in rows], **cols)
            if len(scores) != len(rows):
                raise ValueError(f"mixture domain {name!r}: its reward returned {len(scores)} scores for {len(rows)} rows")
            for i, s in zip(rows, scores):
                out[i] = s
        return out
