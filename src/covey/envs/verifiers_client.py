"""covey's engine as a `verifiers` model client, in process (no HTTP server): `EngineClient`.

A verifiers environment owns its episode loop and asks its client for each model turn
(``client.get_response(prompt_messages, ..., state=state)``). `EngineClient` answers from covey's
engine, token-exact, the way prime-rl's `OpenAIChatCompletionsTokenClient` does with vLLM
(verifiers 0.3.1, `verifiers/legacy/clients/openai_chat_completions_token_client.py`: "TITO",
token-in, token-out):

- turn 0: the prompt ids are the chat template of the prompt messages (generation prompt added);
- turn t > 0, when the prompt messages extend the previous turn's (prompt + completion) messages:
  prompt ids = the previous turn's prompt ids + its sampled ids + the template delta of the new
  (environment / tool) messages (`covey.models.chat.TemplateDelta`: the chat template rendered
  over a fixed dummy conversation with and without them; the end-of-turn token is added when the
  turn was cut by its budget). The sampled ids are never re-tokenized;
- otherwise (the environment rewrote the conversation, or the template rewrites earlier turns) the
  prompt is the chat template of the whole conversation (counted: ``rendered``), and the strategy
  starts a new row there.

The response carries verifiers' `ResponseTokens` (prompt ids, sampled ids, their log-probs) as a
vLLM server with ``return_token_ids`` would; text is decoded from the sampled ids, and Qwen/Hermes
``<tool_call>`` blocks become the message's tool calls (`covey.envs.tools.parse_tool_calls`; a
malformed block stays in the text and is counted). Sampling (temperature, top-p, ...) is covey's
``sampling:`` config; an environment's ``max_tokens`` only caps a turn's budget.

Generation itself goes through a batcher (`covey.strategies.verifiers_rollout`) that sends every
waiting episode's turn to the engine in one call. Needs ``pip install 'covey[verifiers]'``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import verifiers as vf
from verifiers.clients import OpenAIChatCompletionsClient
from verifiers.errors import OverlongPromptError

from covey.envs.tools import parse_tool_calls
from covey.models.chat import TemplateDelta, TemplateError, render

__all__ = ["EngineClient", "Native"]


@dataclass
class Native:
    """One engine turn: what `EngineClient.get_native_response` returns."""

    id: str
    prompt_ids: list[int]
    ids: list[int]
    logprobs: list[float]
    finish: str  # "stop" or "length"
    text: str


def _norm(value: Any) -> Any:
    """Messages as plain JSON values for comparison (pydantic dumped, None dropped, "" content = None)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        out = {str(k): _norm(v) for k, v in value.items() if v is not None}
        if out.get("content") == "":
            out.pop("content")
        return out
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


class EngineClient(OpenAIChatCompletionsClient):
    """A verifiers `Client` over covey's engine. `batcher.generate(episode, prompt_ids, cap)` returns
    a `Native`, or None when the prompt leaves no room (raised as verifiers' `OverlongPromptError`);
    the episode index comes in the sampling args as ``covey_episode``."""

    def __init__(self, batcher, tokenizer):
        super().__init__(batcher)
        self.tok = tokenizer
        self._deltas: dict[str, TemplateDelta | None] = {}
        self.counts = {"rendered": 0, "tool_calls": 0, "tool_malformed": 0}

    def setup_client(self, config):  # pragma: no cover - built from a batcher, never from a ClientConfig
        raise TypeError("EngineClient is built over covey's engine, not from a ClientConfig")

    async def close(self) -> None:
        pass

    def _delta(self, tools: list | None) -> TemplateDelta | None:
        key = json.dumps(_norm(tools), sort_keys=True)
        if key not in self._deltas:
            try:
                self._deltas[key] = TemplateDelta(self.tok, tools or None)
            except TemplateError:
                self._deltas[key] = None  # a rewriting template: every turn is rendered whole
        return self._deltas[key]

    async def prompt_ids(self, prompt: list[dict], tools: list | None, state) -> list[int]:
        """The token ids of this turn's prompt: the previous turn's ids extended by the template delta
        of the new messages when possible (token-exact), else the whole conversation rendered."""
        steps = state["trajectory"] if state is not None else []
        if steps and steps[-1].get("tokens") is not None:
            prev = steps[-1]
            prev_msgs, _ = await self.to_native_prompt([*prev["prompt"], *prev["completion"]])
            k = len(prev_msgs)
            delta = self._delta(tools)
            if delta is not None and len(prompt) > k and _norm(list(prompt[:k])) == _norm(prev_msgs):
                t = prev["tokens"]
                closed = bool(t["completion_ids"]) and t["completion_ids"][-1] == delta.eos
                try:
                    return t["prompt_ids"] + t["completion_ids"] + delta.tokens(list(prompt[k:]), closed)
                except TemplateError:
                    pass
        if steps:
            self.counts["rendered"] += 1
        return render(self.tok, list(prompt), generation_prompt=True, tools=tools or None)

    async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs) -> Native:
        state = kwargs.get("state")
        ids = await self.prompt_ids(prompt, tools, state)
        args = sampling_args or {}
        cap = args.get("max_completion_tokens") or args.get("max_tokens")
        out = await self.client.generate(int(args.get("covey_episode", 0)), ids, int(cap) if cap else None)
        if out is None:
            raise OverlongPromptError(f"the prompt ({len(ids)} tokens) leaves no room under max_context_tokens")
        return out

    async def raise_from_native_response(self, response: Native) -> None:
        pass

    async def from_native_response(self, response: Native) -> vf.Response:
        text, calls = response.text, []
        parsed = parse_tool_calls(text)
        self.counts["tool_calls"] += len(parsed)
        self.counts["tool_malformed"] += sum(c.error is not None for c in parsed)
        good = [c for c in parsed if c.error is None]
        if good:  # as vLLM's hermes parser: the text before the first block is the content
            calls = [vf.ToolCall(id=f"{response.id}-{j}", name=c.name, arguments=json.dumps(c.arguments))
                     for j, c in enumerate(good)]  # fmt: skip
            text = text[: text.index("<tool_call>")].strip()
        finish = "tool_calls" if calls and response.finish == "stop" else response.finish
        n, k = len(response.prompt_ids), len(response.ids)
        tokens = vf.ResponseTokens(prompt_ids=response.prompt_ids, prompt_mask=[0] * n, completion_ids=response.ids,
                                   completion_mask=[1] * k, completion_logprobs=response.logprobs)  # fmt: skip
        message = vf.ResponseMessage(content=text or None, tool_calls=calls or None, finish_reason=finish,
                                     is_truncated=response.finish == "length", tokens=tokens)  # fmt: skip
        usage = vf.Usage(prompt_tokens=n, reasoning_tokens=0, completion_tokens=k, total_tokens=n + k)
        return vf.Response(id=response.id, created=int(time.time()), model="covey", usage=usage, message=message)
