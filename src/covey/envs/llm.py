"""Asking a language model for text: the chat calls of methods whose library, game or environment a
model writes (Training-Free GRPO's experience library, STARLING's generated games, TRACE's capability
analysis). The model is a judge backend (`covey.rewards.judge.backends`): ``policy`` (the trainer's
own engine, handed over with `bind`), ``local`` (another local model), ``openai`` (an endpoint), or any
object with ``complete(requests) -> replies`` and a ``fingerprint`` (tests script one).

It only sends chat messages and returns texts: parsing what comes back, and surviving a reply that
does not parse, is the caller's job (a failed call returns None; it never raises).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from covey.rewards.judge.backends import JudgeRequest, build_backend

__all__ = ["Asker", "json_block"]


@dataclass
class Asker:
    """``ask(conversations) -> [text or None]``: one batched call of a judge backend.

    backend:         a backend spec (``"policy"``, ``{kind: local, model: ...}``, ``{kind: openai, ...}``) or object.
    max_new_tokens:  the reply budget of each call.
    temperature:     0 decodes greedily.
    """

    backend: Any = "policy"
    max_new_tokens: int = 512
    temperature: float = 0.0

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.temperature < 0:
            raise ValueError(f"need max_new_tokens >= 1 and temperature >= 0, got {self.max_new_tokens}, {self.temperature}")
        self.backend = build_backend(self.backend)

    def bind(self, ctx) -> None:
        """Hand the rollout's engine to a ``policy`` backend (the live policy answers)."""
        if getattr(self.backend, "kind", None) == "policy":
            self.backend.set_context(engine=ctx.engine, tokenizer=ctx.tokenizer, policy_version=ctx.policy_version)

    def ask(self, conversations: list[list[dict]], seed: int = 0) -> list[str | None]:
        """The reply to each conversation ([{"role", "content"}, ...]); None where the call failed."""
        if not conversations:
            return []
        requests = [JudgeRequest(messages=tuple((m["role"], m["content"]) for m in conv), max_new_tokens=self.max_new_tokens,
                                 temperature=self.temperature, seed=seed + i) for i, conv in enumerate(conversations)]  # fmt: skip
        try:
            replies = self.backend.complete(requests)
        except Exception:  # noqa: BLE001 - a backend that fails is no reply, not a lost run
            return [None] * len(conversations)
        return [r.text if r.error is None else None for r in replies]


def json_block(text: str | None) -> Any:
    """The JSON value of a reply: the text after its last ```json fence and before the next ``` (the
    whole text when there is no fence), parsed; None when it does not parse.

    >>> json_block('Plan:\\n```json\\n[{"operation": "ADD"}]\\n```'), json_block("no json")
    ([{'operation': 'ADD'}], None)
    """
    import json

    if text is None:
        return None
    body = text.split("```json")[-1].split("```")[0]
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None
