"""The environment seam: a gym-shaped, text-in/messages-out environment for multi-turn agents.

An environment is built once per episode as ``factory(**params)`` from config
``env: {name, ...params}`` (registered in `ENVS`, or an import path ``package.module:Name``). The
`episodes` rollout strategy (`covey.strategies.episodes`) drives it:

    result = env.reset(item, seed=seed)     # the first messages (system/user) of the episode
    while not (result.terminated or result.truncated):
        action = <one model turn, parsed>   # `Action`: text, sampled token ids, tool calls
        result = env.step(action)           # messages to append (role user/tool), reward, ...
    env.close()

The environment never sees tokens and never re-renders the history: it returns new chat messages,
and the strategy tokenizes them against the chat template (covey owns the token stream). The G
episodes of a group get the same `seed`, so their initial states coincide and step-level credit
(GiGPO, HGPO) finds repeated states through `StepResult.anchor`.

Optional methods (looked up with getattr; an env without them still works):

    env.fork() -> Env                       # a deep copy of the live env: one state, several continuations
    await env.astep(action) -> StepResult   # an async step: the strategy steps live episodes concurrently

`fork` is for turn-level trees (branching an episode at a turn); `fork_env(env)` calls it and raises
a one-line NotImplementedError for an env without it. The built-in envs (maze, calculator,
search_qa) fork; the adapters fork when the library's environment can be deep-copied.

Conventions follow Gymnasium: `terminated` = the task ended (goal reached, answer given, failed for
good), `truncated` = cut by a limit. `info["valid"] = False` marks an invalid action (counted; a
streak of them ends the episode, `episodes.max_invalid`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from covey.registry import Registry

__all__ = ["ENVS", "Action", "Env", "MissingExtra", "StepResult", "ToolCall", "fork_env", "register_env"]


class MissingExtra(ImportError, ValueError):
    """An environment's optional package is not installed (a ValueError too, so the config check
    reports it as a one-line error before any model loads)."""


@dataclass
class ToolCall:
    """One tool call parsed from a model turn. `arguments` is None and `error` says why when the
    call did not parse; the environment answers such a call with a tool error message."""

    name: str
    arguments: dict | None
    error: str | None = None


@dataclass
class Action:
    """What the model did in one turn, as the episode loop parsed it."""

    text: str  # the decoded turn (special tokens dropped)
    token_ids: list[int]  # exactly the sampled ids
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" or "length" (the turn hit its token budget)


@dataclass
class StepResult:
    """What `reset` and `step` return.

    messages:   chat messages to append ({"role": "system"|"user"|"tool", "content": str}); reset
                returns the episode's first messages, step the environment's answer to the action.
    reward:     this step's reward (the terminal reward on the last step; 0 from reset).
    terminated: the task ended (Gymnasium's `terminated`).
    truncated:  cut by a limit of the environment (Gymnasium's `truncated`).
    anchor:     the environment state without its history (hashable; None = no anchor): the state
                the NEXT action is taken in, which GiGPO/HGPO group steps by.
    info:       free-form; "valid": False marks an invalid action, "success": bool the outcome.
    """

    messages: list[dict]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    anchor: Hashable | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@runtime_checkable
class Env(Protocol):
    """An environment for one episode at a time. `tools` (OpenAI function schemas, or None) are passed
    to the chat template when the tokenizer's template renders tools."""

    tools: list[dict] | None

    def reset(self, item: dict, *, seed: int) -> StepResult: ...

    def step(self, action: Action) -> StepResult: ...

    def close(self) -> None: ...


def fork_env(env: Env) -> Env:
    """`env.fork()`: an independent deep copy of a live environment (stepping one never changes the
    other). NotImplementedError when the environment has no `fork`."""
    fork = getattr(env, "fork", None)
    if not callable(fork):
        raise NotImplementedError(f"environment {type(env).__name__} has no fork(): it cannot branch one state into several "
                                  "continuations (add a fork() that returns a deep copy)")  # fmt: skip
    return fork()


ENVS = Registry("environment", protocol=Env, signature="Env(**params) with reset(item, *, seed), step(action), close(), tools")
register_env = ENVS.register
