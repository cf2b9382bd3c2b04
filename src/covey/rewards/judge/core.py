"""`Judge`: backend x template x parser, with the cache, parse retries and failure counting shared by
every judge-based reward (`JudgeReward`, `ArenaReward`).

    ask(list of template field dicts) -> (parsed values, None = failed), why, stats
    ask_both_orders(list of (prompt, x, y)) -> the pairwise rewards' (x as A, y as B) and (y as A, x as B)

Identical requests within one call are sent once. A reply that does not parse is asked again
`parse_retries` times at `retry_temperature` with a new seed (default: once, at 0.7); a request the
backend itself failed (HTTP errors after its own retries, a prompt too long for the model) is not.
Only parsed replies are cached. stats: requests, cache_hits, parse_failures, backend_errors, http_errors
(counts over requests and attempts); `why` says per field dict why it failed ("parse", "backend") or None.
"""

from __future__ import annotations

import json
from typing import Any

from covey.rewards.judge.backends import JudgeReply, JudgeRequest, build_backend
from covey.rewards.judge.cache import JudgeCache, cache_key
from covey.rewards.judge.parsers import PARSERS
from covey.rewards.judge.templates import get_template

__all__ = ["Judge", "JudgeHolder", "pairwise_judge", "parse_parser_spec"]


def parse_parser_spec(spec) -> tuple[str, dict]:
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and "name" in spec:
        params = dict(spec)
        name = params.pop("name")
    else:
        raise ValueError("judge: parser must be a name or {name: ..., <its options>}")
    if name not in PARSERS:
        raise ValueError(f"judge: unknown parser {name!r}; choose from {', '.join(PARSERS)}")
    fn = PARSERS[name][0]
    try:  # check the options now, on a reply that parses to anything
        fn("" if PARSERS[name][1] == "text" else None, **params)
    except TypeError as e:
        raise ValueError(f"judge: parser {name!r}: {e}") from None
    return name, params


class JudgeHolder:
    """Base of the rewards that hold a `Judge` as ``self.judge``: the `policy` backend's seam with the runner.
    Such a reward declares ``needs_engine`` (and so runs in the trainer's process, ``in_process``); the
    runner's `set_context` hands it the trainer's engine, tokenizer and policy version before scoring."""

    judge: Judge

    @property
    def needs_engine(self) -> bool:
        return getattr(self.judge.backend, "kind", None) == "policy"

    @property
    def in_process(self) -> bool:
        return self.needs_engine

    def set_context(self, **context) -> None:
        self.judge.backend.set_context(**context)


class Judge:
    def __init__(self, backend, template: str = "yes_no_match", parser: Any = "yes_no", *, max_new_tokens: int = 4,
                 temperature: float = 0.0, top_p: float = 1.0, stop: list[str] | tuple[str, ...] = (), seed: int = 0,
                 parse_retries: int = 1, retry_temperature: float = 0.7, cache_size: int = 8192,
                 cache_file: str | None = None, template_system: str | None = None):
        if max_new_tokens < 1 or parse_retries < 0 or temperature < 0 or not 0 < top_p <= 1:
            raise ValueError("judge: max_new_tokens >= 1, parse_retries >= 0, temperature >= 0 and 0 < top_p <= 1 needed")
        self.backend = build_backend(backend)
        self.template = get_template(template, template_system)
        self.parser_name, self.parser_params = parse_parser_spec(parser)
        self.reads = PARSERS[self.parser_name][1]
        if self.reads == "choices" and getattr(self.backend, "kind", None) not in ("local", None):
            raise ValueError(f"judge: parser {self.parser_name!r} scores log-probs, which only the local backend gives")
        self.choices = ("YES", "NO") if self.reads == "choices" else None
        self.max_new_tokens, self.temperature, self.top_p = int(max_new_tokens), float(temperature), float(top_p)
        self.stop, self.seed = tuple(stop), int(seed)
        self.parse_retries, self.retry_temperature = int(parse_retries), float(retry_temperature)
        self.cache = JudgeCache(cache_size, cache_file)

    def _request(self, fields: dict, temperature: float, seed: int) -> JudgeRequest:
        msgs = self.template.messages(**fields)
        return JudgeRequest(tuple((m["role"], m["content"]) for m in msgs), self.max_new_tokens, temperature,
                            self.top_p, self.stop, self.choices, seed)

    def _key(self, req: JudgeRequest) -> str:
        return cache_key(getattr(self.backend, "kind", type(self.backend).__name__), self.backend.fingerprint,
                         self.template.sha256, req.messages, req.max_new_tokens, req.temperature, req.top_p, req.stop,
                         req.choices, req.seed if req.temperature > 0 else None)

    def parse(self, stored: str) -> Any:
        fn = PARSERS[self.parser_name][0]
        value = json.loads(stored) if self.reads == "choices" else stored
        return fn(value, **self.parser_params)

    @staticmethod
    def _stored(reply: JudgeReply, reads: str) -> str | None:
        if reads == "choices":
            return json.dumps(reply.choice_logprobs) if reply.choice_logprobs is not None else None
        return reply.text

    def ask(self, fields: list[dict]) -> tuple[list[Any], list[str | None], dict[str, float]]:
        stats = dict.fromkeys(("requests", "cache_hits", "parse_failures", "backend_errors", "http_errors"), 0.0)
        results: list[Any] = [None] * len(fields)
        why: list[str | None] = [None] * len(fields)  # per field dict: None, "parse" or "backend"
        pending = list(range(len(fields)))
        for attempt in range(self.parse_retries + 1):
            temp = self.temperature if attempt == 0 else self.retry_temperature
            reqs = {i: self._request(fields[i], temp, self.seed + attempt) for i in pending}
            keys = {i: self._key(r) for i, r in reqs.items()}
            misses: dict[str, list[int]] = {}
            for i in pending:
                hit = self.cache.get(keys[i])
                if hit is not None:
                    stats["cache_hits"] += 1
                    results[i], why[i] = self.parse(hit), None
                else:
                    misses.setdefault(keys[i], []).append(i)
            order = list(misses)
            replies = self.backend.complete([reqs[misses[k][0]] for k in order]) if order else []
            stats["requests"] += len(order)
            retry: list[int] = []
            for k, reply in zip(order, replies):
                stats["http_errors"] += reply.http_errors
                stored = None if reply.error else self._stored(reply, self.reads)
                value = self.parse(stored) if stored is not None else None
                if stored is None:
                    stats["backend_errors"] += 1
                elif value is None:
                    stats["parse_failures"] += 1
                    retry.extend(misses[k])
                else:
                    self.cache.put(k, stored)
                for i in misses[k]:
                    results[i] = value
                    why[i] = "backend" if stored is None else "parse" if value is None else None
            pending = retry
            if not pending:
                break
        return results, why, stats

    def ask_both_orders(self, pairs: list[tuple[str, str, str]]) -> tuple[list[tuple[Any, Any]], list[str | None], dict[str, float]]:
        """Each ``(prompt, x, y)`` judged in both orders, (a = x, b = y) then (a = y, b = x), against
        position bias: per pair (order 1 value, order 2 value) (None = failed), and `ask`'s why (two
        entries a pair, in that order) and stats; no request for no pairs."""
        fields = []
        for query, x, y in pairs:
            fields.append({"prompt": query, "a": x, "b": y, "completion": "", "answer": ""})
            fields.append({"prompt": query, "a": y, "b": x, "completion": "", "answer": ""})
        values, why, stats = self.ask(fields) if fields else ([], [], {})
        return list(zip(values[0::2], values[1::2])), why, stats


def pairwise_judge(name: str, backend, template: str, parser: Any, **options) -> Judge:
    """A `Judge` for reward `name` that compares two completions: the template has {a} and {b}, the parser
    (json_pair) reads a score for each. `options` as for `Judge`."""
    judge = Judge(backend, template, parser, **options)
    if not judge.template.pairwise:
        raise ValueError(f"{name}: the template must have both {{a}} and {{b}} fields (the two completions compared)")
    if judge.parser_name != "json_pair":
        raise ValueError(f"{name}: the parser must be json_pair (a score for each of the two completions)")
    return judge
