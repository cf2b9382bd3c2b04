"""`episodes`: multi-turn agent rollouts against an environment (`covey.envs`), token-exact.

Per item, G episodes share one environment seed (so their initial states coincide). Each turn, all
live episodes go to the engine in ONE `generate` call (n=1 per episode); each turn's output is
parsed (`<tool_call>` JSON, Qwen/Hermes) into an `Action` and handed to its environment. The
sampled ids are what the row trains on, never a re-tokenization of their text. Layouts:

concat (one row per episode; `auto` picks it when the chat template appends turns):

    row tokens = prompt (chat template of the reset messages, generation prompt added)
               + turn 0 sampled ids (mask 1) + env tokens (mask 0) + turn 1 sampled ids (mask 1) + ...

    Environment messages are tokenized as the difference between the chat template rendered over a
    fixed dummy conversation with and without them (`TemplateDelta`), starting right after the
    assistant's end-of-turn token; when a turn was cut by its token budget, the end-of-turn token
    the template would have written is added as an env token. The engine's prompt at each turn is
    the row so far.

per_step (one row per turn; `auto` picks it when the template rewrites earlier turns, e.g. drops
    past ``<think>`` blocks, detected once per tokenizer): the prompt of turn t is the chat template
    of the conversation so far (earlier turns as decoded text, rewritten as the template does), the
    engine samples from exactly that prompt, and the row is (that prompt, the turn's sampled ids).

Every row carries `Rollouts.episode` (rows of one episode share it), `turn` (each agent token's
turn, -1 on env tokens and padding) and its episode's `step_rewards` / `step_anchors` (one entry
per turn: the env reward, and the anchor of the state the turn acted in) and `step_agents` (the
agent, or role, that acted each turn: the env's ``info["agent"]`` from the step before, 0 by
default; multi-agent envs such as `solver_verifier`). `rewards` is one column,
`env_return` (the episode's sum of step rewards, on each of its rows); reward functions and
shaping are not applied. With per_step, an episode of k turns is k rows (no per-episode
aggregation yet).

Reward: ``rewards: env`` (default) gives each row its episode's `env_return`; ``rewards: functions``
leaves the rows unscored, so the run's reward functions (the task verifier and `rewards:`) score each
episode: its completion is its final model turn (`Rollouts.reward_text`), its columns the item's plus
what the env reported in ``info["columns"]`` (search_qa's `retrieved` documents: E-GRPO's entity
reward). An env may rewrite the turn the conversation keeps (``info["replace_action"]``, UI-S1's
semi-online patch; layout per_step), and ``info["valid"]`` of each turn is kept in `step_valid`.

Limits (each ends an episode with a counted reason, `episodes/end/<reason>`): the env's own
terminated / truncated; `max_turns`; the context (`max_context_tokens`; each turn's budget is
`min(sampling.max_new_tokens, the draw's max_new_tokens, max_context_tokens - tokens so far)`); `max_invalid` invalid actions in
a row (``info["valid"] = False`` or only malformed tool calls); an env call that raises
(`env_error`) or takes longer than `step_timeout_s` (`env_timeout`, its thread is abandoned). The
live episodes' env calls run concurrently: an env's `astep` (async) on one event loop, a plain
`step` in a thread each; `env_workers` caps how many run at a time. Failed
episodes, and episodes whose first prompt leaves no room to generate, are dropped from the batch
(counted); the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from covey.engine.base import Engine
from covey.envs.base import ENVS, Action, Env, StepResult, ToolCall
from covey.envs.tools import parse_tool_calls
from covey.models.chat import TemplateDelta, TemplateError, render
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["Episodes"]

log = logging.getLogger(__name__)


@dataclass
class _Turn:
    """One model turn: the prompt the engine saw, what it sampled, and the env tokens that follow it
    in a concat row (empty after the last turn, and always in per_step rows)."""

    prompt: list[int]
    ids: list[int]
    logprobs: list[float]
    entropies: list[float] | None
    versions: list[int]
    finish: str
    env_ids: list[int] = field(default_factory=list)


@dataclass
class _Episode:
    env: Env | None
    item: dict
    group: int
    prompt: list[int]  # the first prompt (the reset messages, generation prompt added)
    max_new_tokens: int | None = None  # the sampler's cap on each turn (Draw.max_new_tokens)
    messages: list[dict] = field(default_factory=list)  # the conversation (per_step prompts are rendered from it)
    anchor: Any = None
    agent: int = 0  # the agent (role) that acts next (the env's info["agent"], 0 by default)
    agents: list[int] = field(default_factory=list)  # the agent of each turn
    valids: list[bool] = field(default_factory=list)  # whether each turn was a valid action
    columns: dict[str, Any] = field(default_factory=dict)  # what the env reported for the reward (info["columns"])
    turns: list[_Turn] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    anchors: list[Any] = field(default_factory=list)
    invalid_streak: int = 0
    end: str | None = None  # why it ended
    terminated: bool = False
    success: bool | None = None
    transcript: list[dict] = field(default_factory=list)  # the episode turn by turn, with roles (samples.jsonl)

    def stream(self) -> list[int]:
        """The concat row so far: the first prompt, then each turn's sampled ids and env tokens."""
        return self.prompt + [x for t in self.turns for x in t.ids + t.env_ids]


class _EnvFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


def _check_result(out: Any) -> StepResult:
    """The env's return value, checked: a bad one is the env's bug (an env_error of its episode)."""
    if not isinstance(out, StepResult):
        raise TypeError(f"an environment must return a StepResult, got {type(out).__name__}")
    for m in out.messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TypeError(f"environment message {m!r} must be a dict with 'role' and 'content' strings")
    if not isinstance(out.reward, (int, float)) or not math.isfinite(out.reward):
        raise TypeError(f"environment reward must be a finite number, got {out.reward!r}")
    if not isinstance(out.info, dict) or not isinstance(out.info.get("tool_errors", 0), int):
        raise TypeError(f"environment info must be a dict (with an int 'tool_errors' if any), got {out.info!r}")
    agent = out.info.get("agent", 0)
    if not isinstance(agent, int) or isinstance(agent, bool) or agent < 0:
        raise TypeError(f"environment info['agent'] must be an int >= 0 (the role that acts next), got {agent!r}")
    columns = out.info.get("columns", {})
    if not isinstance(columns, dict) or not all(isinstance(k, str) for k in columns):
        raise TypeError(f"environment info['columns'] must be a dict with str keys (columns for the reward), got {columns!r}")
    said = out.info.get("replace_action")
    if said is not None and not isinstance(said, str):
        raise TypeError(f"environment info['replace_action'] must be a str (the turn the conversation keeps), got {said!r}")
    return out


def _timed(fn: Callable[[], Any], box: dict, check: Callable[[Any], Any] = _check_result) -> None:
    t0 = time.perf_counter()
    try:
        box["out"] = check(fn())
    except Exception as e:  # noqa: BLE001 - any env bug fails its episode, not the run
        box["err"] = _EnvFailure("env_error", f"{type(e).__name__}: {e}")
    box["s"] = time.perf_counter() - t0


async def _atimed(fn: Callable[[], Any], box: dict, timeout_s: float, slots: asyncio.Semaphore | None) -> None:
    async with slots if slots is not None else contextlib.nullcontext():
        t0 = time.perf_counter()
        try:
            box["out"] = _check_result(await asyncio.wait_for(fn(), timeout_s))
        except asyncio.TimeoutError:
            return  # no "s": an env_timeout
        except Exception as e:  # noqa: BLE001 - any env bug fails its episode, not the run
            box["err"] = _EnvFailure("env_error", f"{type(e).__name__}: {e}")
        box["s"] = time.perf_counter() - t0


def _run_async(calls: list[Callable[[], Any]], boxes: list[dict], timeout_s: float, workers: int | None) -> None:
    async def main():
        slots = asyncio.Semaphore(workers) if workers else None
        await asyncio.gather(*(_atimed(fn, box, timeout_s, slots) for fn, box in zip(calls, boxes)))

    asyncio.run(main())


def run_with_timeout(calls: list[Callable[[], Any]], timeout_s: float, *, workers: int | None = None,
                     async_calls: list[bool] | None = None, check: Callable[[Any], Any] = _check_result,
                     what: str = "the call") -> list[tuple[Any, float]]:  # fmt: skip
    """Run env `calls` concurrently; per call (its checked `StepResult` or an `_EnvFailure`, seconds).

    A call flagged in `async_calls` returns a coroutine (an env's `astep`): those run together on one
    event loop (in a daemon thread, so an `astep` that blocks the loop cannot hang the run), each
    under `asyncio.wait_for(timeout_s)`. The others run in daemon threads (the fallback for a sync
    `step`). `workers` (None = all at once) caps how many calls run at a time: sync calls go in
    waves of `workers` threads, async ones share a semaphore of `workers` slots. A call that has not
    returned `timeout_s` after it started is abandoned as ``env_timeout`` (its thread keeps running
    detached). `check` turns a sync call's return value into the answer (default: a checked `StepResult`;
    the env's constructor and `close` pass others); `what` names the call in the timeout message."""
    flags = async_calls or [False] * len(calls)
    boxes: list[dict] = [{} for _ in calls]
    aidx = [i for i, f in enumerate(flags) if f]
    loop_thread = None
    if aidx:
        waves = math.ceil(len(aidx) / workers) if workers else 1
        loop_thread = threading.Thread(target=_run_async, args=([calls[i] for i in aidx], [boxes[i] for i in aidx], timeout_s, workers),
                                       daemon=True)  # fmt: skip
        loop_deadline = time.perf_counter() + waves * timeout_s + 1.0  # the loop itself blocked: all its calls time out
        loop_thread.start()
    sidx = [i for i, f in enumerate(flags) if not f]
    size = workers or max(len(sidx), 1)
    for w in range(0, len(sidx), size):
        wave = sidx[w : w + size]
        threads = [threading.Thread(target=_timed, args=(calls[i], boxes[i], check), daemon=True) for i in wave]
        start = time.perf_counter()
        for th in threads:
            th.start()
        for i, th in zip(wave, threads):
            th.join(max(0.0, start + timeout_s - time.perf_counter()))
            if th.is_alive():
                boxes[i] = {}  # abandoned: a late answer is not read
    if loop_thread is not None:  # a call without an answer by then (even one that blocked the loop) timed out
        loop_thread.join(max(0.0, loop_deadline - time.perf_counter()))
    out = []
    for box in boxes:
        if "s" not in box:
            out.append((_EnvFailure("env_timeout", f"{what} gave no answer within step_timeout_s={timeout_s}"), timeout_s))
        else:
            out.append((box.get("out", box.get("err")), box["s"]))
    return out


@register_strategy("episodes")
class Episodes:
    """Multi-turn episodes against the `env` environment (given by the config's top-level ``env:``)."""

    caps = StrategyCaps(takes_env=True, env_reward=lambda params: params.get("rewards", "env") == "env")

    def __init__(self, *, env: dict, max_turns: int = 8, max_context_tokens: int = 1024, max_invalid: int = 3,
                 step_timeout_s: float = 30.0, layout: Literal["auto", "concat", "per_step"] = "auto",
                 env_workers: int | None = None, rewards: Literal["env", "functions"] = "env"):  # fmt: skip
        if not isinstance(env, dict) or not isinstance(env.get("name"), str):
            raise ValueError(f"episodes: env must be a mapping with a 'name', got {env!r}")
        if max_turns < 1 or max_context_tokens < 2 or max_invalid < 1 or not step_timeout_s > 0:
            raise ValueError("episodes: need max_turns >= 1, max_context_tokens >= 2, max_invalid >= 1, step_timeout_s > 0 "
                             f"(got {max_turns}, {max_context_tokens}, {max_invalid}, {step_timeout_s})")  # fmt: skip
        if env_workers is not None and env_workers < 1:
            raise ValueError(f"episodes: env_workers must be >= 1 (or null: every live episode at once), got {env_workers}")
        self.env_workers = env_workers
        if layout not in ("auto", "concat", "per_step"):
            raise ValueError(f"episodes: layout must be auto, concat or per_step, got {layout!r}")
        self.layout = layout
        if rewards not in ("env", "functions"):
            raise ValueError(f"episodes: rewards must be env (the env's return) or functions (the run's reward functions), got {rewards!r}")
        self.rewards = rewards
        self.env_name, self.env_params = env["name"], {k: v for k, v in env.items() if k != "name"}
        ENVS.check_params(self.env_name, self.env_params)
        self.max_turns, self.max_context, self.max_invalid = max_turns, max_context_tokens, max_invalid
        self.timeout = float(step_timeout_s)
        # bad env parameter values fail now (before the model loads), not at the first step; a constructor or
        # close() that hangs is a one-line error naming the environment, not a stalled start
        ((env, _),) = run_with_timeout([self.new_env], self.timeout, check=_as_is, what=self._label("constructor"))
        if isinstance(env, _EnvFailure):
            raise ValueError(f"episodes: {env} (building one to check its parameters)")
        ((closed, _),) = run_with_timeout([env.close], self.timeout, check=_as_is, what=self._label("close()"))
        if isinstance(closed, _EnvFailure):
            raise ValueError(f"episodes: {closed} (closing the environment built to check its parameters)")
        self._tok: Any = None  # the tokenizer the layout was chosen for
        self._tools: list[dict] | None = None
        self._delta: TemplateDelta | None = None  # concat: env messages -> tokens
        self._per_step = layout == "per_step"
        self._warned: set[str] = set()

    def new_env(self) -> Env:
        return ENVS.build(self.env_name, self.env_params)

    def _label(self, call: str) -> str:
        return f"environment {self.env_name!r} {call}"

    # -------------------------------------------------------------------------------- the loop
    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        counts: Counter = Counter()
        env_times: list[float] = []
        base_seed = ctx.sampling(0).seed or 0
        episodes = [_Episode(env=None, item=d.item, group=g, prompt=[], max_new_tokens=d.max_new_tokens)
                    for g, d in enumerate(ctx.draws) for _ in range(d.n)]  # fmt: skip
        self._reset(episodes, base_seed, tok, counts, env_times)
        for turn in range(self.max_turns):
            live, prompts = self._live(episodes, tok)
            if not live:
                break
            actions = self._generate(live, prompts, ctx, turn, counts)
            results = self._step_envs(live, actions)
            for ep, action, (res, secs) in zip(live, actions, results):
                env_times.append(secs)
                self._record(ep, action, res, turn, counts)
        self._close([ep.env for ep in episodes if ep.env is not None])
        kept = [ep for ep in episodes if ep.end not in ("env_error", "env_timeout") and ep.rewards]
        metrics = _metrics(episodes, kept, counts, env_times)
        metrics["episodes/per_step_layout"] = float(self._per_step)
        if self.rewards == "functions":  # reward/mean is the reward functions' (the trainer scores the batch)
            metrics.pop("reward/mean", None)
        return self._batch(kept, tok, ctx), metrics

    def _close(self, envs: list[Env]) -> None:
        """Close the episodes' envs, each within `step_timeout_s` (after an abandoned step too); a close that
        raises or hangs is logged once, never waited for longer."""
        calls = [env.close for env in envs]
        for res, _ in run_with_timeout(calls, self.timeout, workers=self.env_workers, check=_as_is,
                                       what=self._label("close()")):  # fmt: skip
            if isinstance(res, _EnvFailure):
                self._warn("close", f"{res} (left behind)" if res.kind == "env_timeout" else
                                    f"environment {self.env_name!r} close() raised {res}")  # fmt: skip

    def _reset(self, episodes: list[_Episode], base_seed: int, tok, counts: Counter, env_times: list[float]) -> None:
        """Build and reset every episode's env (group g gets seed base_seed + g), each call within
        `step_timeout_s`; choose the layout."""
        built = []
        made = run_with_timeout([self.new_env] * len(episodes), self.timeout, workers=self.env_workers, check=_as_is,
                                what=self._label("constructor"))  # fmt: skip
        for ep, (env, _) in zip(episodes, made):
            if isinstance(env, _EnvFailure):  # a factory that fails (or hangs) fails its episode
                self._fail(ep, env, counts)
            else:
                ep.env = env
                built.append(ep)
        calls = [lambda ep=ep: ep.env.reset(ep.item, seed=base_seed + ep.group) for ep in built]
        for ep, (res, secs) in zip(built, run_with_timeout(calls, self.timeout, workers=self.env_workers,
                                                           what=self._label("reset()"))):  # fmt: skip
            env_times.append(secs)
            if isinstance(res, _EnvFailure):
                self._fail(ep, res, counts)
                continue
            ep.anchor, ep.messages, ep.agent = res.anchor, list(res.messages), res.info.get("agent", 0)
            ep.transcript = [dict(m) for m in res.messages]
            if not self._take_columns(ep, res, counts):
                continue
            self._template(tok, ep.env)
            if not self._may_fit(tok, res.messages, self.max_context):
                ep.end = "context"  # never tokenised: the first prompt alone is over the context
                continue
            ep.prompt = render(tok, res.messages, generation_prompt=True, tools=self._tools)
            if res.done:
                self._fail(ep, _EnvFailure("env_error", "reset() returned a finished episode"), counts)

    def _step_envs(self, live: list[_Episode], actions: list[Action]) -> list[tuple[Any, float]]:
        """Step every live episode's env at once: `astep` (a coroutine) when the env has one, else
        `step` in a thread; at most `env_workers` calls at a time, each within `step_timeout_s`."""
        asyncs = [callable(getattr(ep.env, "astep", None)) for ep in live]
        calls = [(lambda ep=ep, a=a: ep.env.astep(a)) if is_async else (lambda ep=ep, a=a: ep.env.step(a))
                 for ep, a, is_async in zip(live, actions, asyncs)]  # fmt: skip
        return run_with_timeout(calls, self.timeout, workers=self.env_workers, async_calls=asyncs,
                                what=self._label("step()"))

    def _live(self, episodes: list[_Episode], tok) -> tuple[list[_Episode], list[list[int]]]:
        """The episodes that go on, with this turn's prompt (ending those with no room left)."""
        live, prompts = [], []
        for ep in episodes:
            if ep.end is not None:
                continue
            p = render(tok, ep.messages, generation_prompt=True, tools=self._tools) if self._per_step else ep.stream()
            if self.max_context - len(p) < 1:
                ep.end = "context"
                continue
            live.append(ep)
            prompts.append(p)
        return live, prompts

    def _generate(self, live: list[_Episode], prompts: list[list[int]], ctx: RolloutContext, turn: int,
                  counts: Counter) -> list[Action]:  # fmt: skip
        """One engine call for every live episode (each turn's budget clipped to its context left);
        records each turn and parses it into an `Action`."""
        sp = ctx.sampling(turn)
        budgets = tuple(min(sp.max_new_tokens, ep.max_new_tokens or sp.max_new_tokens, self.max_context - len(p))
                        for ep, p in zip(live, prompts))  # fmt: skip
        call = sp if all(b == sp.max_new_tokens for b in budgets) else replace(sp, prompt_max_new_tokens=budgets)
        gen = ctx.engine.generate(prompts, 1, call)
        actions = []
        for i, (ep, k) in enumerate(zip(live, gen.lengths.tolist())):
            ids = gen.completion_ids[i, :k].tolist()
            ent = gen.entropies[i, :k].tolist() if gen.entropies is not None else None
            ver = gen.policy_version[i, :k].tolist() if gen.policy_version is not None else [ctx.policy_version] * k
            ep.turns.append(_Turn(prompts[i], ids, gen.logprobs[i, :k].tolist(), ent, ver, gen.finish_reason[i]))
            ep.anchors.append(ep.anchor)
            ep.agents.append(ep.agent)
            text = ctx.tokenizer.decode(ids, skip_special_tokens=True)
            try:
                calls = parse_tool_calls(text)
            except Exception as e:  # noqa: BLE001 - a turn the parser cannot read is a malformed call, not a lost run
                calls = [ToolCall("", None, f"the tool calls could not be read ({type(e).__name__})")]
            counts["tool_calls"] += len(calls)
            counts["tool_malformed"] += sum(c.error is not None for c in calls)
            actions.append(Action(text, ids, calls, gen.finish_reason[i]))
            ep.transcript.append({"role": "assistant", "content": text, "turn": turn, "agent": ep.agent,
                                  "finish_reason": gen.finish_reason[i]})  # fmt: skip
        return actions

    def _record(self, ep: _Episode, action: Action, res: StepResult | _EnvFailure, turn: int, counts: Counter) -> None:
        """The env's answer to one turn: reward, anchor, counters, and whether (and why) the episode ends."""
        counts["turns"] += 1
        if isinstance(res, _EnvFailure):
            ep.rewards.append(0.0)
            ep.valids.append(False)
            self._fail(ep, res, counts)
            return
        ep.rewards.append(float(res.reward))
        ep.anchor, ep.agent = res.anchor, res.info.get("agent", 0)
        ep.transcript[-1]["reward"] = float(res.reward)
        if res.info.get("replace_action") is not None:  # the turn the conversation keeps instead (semi-online patch)
            ep.transcript[-1]["replaced_by"] = res.info["replace_action"]
        ep.transcript += [{**m, "turn": turn} for m in res.messages]
        counts["tool_errors"] += int(res.info.get("tool_errors", 0))
        if "success" in res.info:
            ep.success = bool(res.info["success"])
        malformed_only = bool(action.tool_calls) and all(c.error is not None for c in action.tool_calls)
        invalid = res.info.get("valid") is False or malformed_only
        ep.valids.append(not invalid)
        counts["invalid"] += invalid
        if not self._take_columns(ep, res, counts):
            return
        ep.invalid_streak = ep.invalid_streak + 1 if invalid else 0
        if res.terminated or res.truncated:
            ep.end, ep.terminated = ("terminated" if res.terminated else "truncated"), res.terminated
        elif ep.invalid_streak >= self.max_invalid:
            ep.end = "invalid_streak"
        elif turn + 1 == self.max_turns:
            ep.end = "max_turns"
        else:
            room = self.max_context if self._per_step else self.max_context - len(ep.stream())
            if not self._may_fit(self._tok, res.messages, room):
                ep.end = "context"  # the observation alone is over the context: never tokenised
                return
            said = res.info.get("replace_action")
            if said is not None:  # semi-online (UI-S1): the conversation goes on from the patched turn
                if not self._per_step:
                    self._fail(ep, _EnvFailure("env_error", "info['replace_action'] rewrites the conversation, which a "
                                                            "concat row cannot: set rollout.strategy.layout: per_step"), counts)  # fmt: skip
                    return
            ep.messages += [{"role": "assistant", "content": action.text if said is None else said}, *res.messages]
            if not self._per_step:
                self._append_env_tokens(ep, action, res, counts)

    def _take_columns(self, ep: _Episode, res: StepResult, counts: Counter) -> bool:
        """Keep the columns the env reported (``info["columns"]``, the latest value of each); a column that
        would replace one of the item's fails the episode (a reward's gold answer stays the dataset's)."""
        columns = res.info.get("columns") or {}
        clash = sorted(set(columns) & (set(ep.item) | {"transcript", "episode_end", "episode_success"}))
        if clash:
            self._fail(ep, _EnvFailure("env_error", f"info['columns'] {clash} would replace the item's own columns"), counts)
            return False
        ep.columns.update(columns)
        return True

    @staticmethod
    def _may_fit(tok, messages: list[dict], room: int) -> bool:
        """False when `messages` certainly take more than `room` tokens, judged from their length in characters
        (no token covers more characters than the tokenizer's longest token string), without tokenising them:
        a 20 MB observation is refused at once instead of tokenised for minutes."""
        chars = sum(len(m["content"]) for m in messages)
        return chars <= max(room, 0) * _longest_token(tok)

    def _template(self, tok, env: Env) -> None:
        """Once per tokenizer: the layout (`auto` takes per_step when the template rewrites earlier
        turns, and says so once; `concat` refuses such a template) and, for concat, its `TemplateDelta`."""
        if self._tok is tok:
            return
        self._tok, self._tools = tok, getattr(env, "tools", None)
        self._delta, self._per_step = None, self.layout == "per_step"
        if self._per_step:
            return
        try:
            self._delta = TemplateDelta(tok, self._tools)
        except TemplateError as e:
            if self.layout == "concat":
                raise TemplateError(f"{e}; use rollout.strategy.layout per_step (or auto)") from None
            self._per_step = True
            log.warning("episodes: layout auto chose per_step (one row per turn): %s", e)

    def _append_env_tokens(self, ep: _Episode, action: Action, res: StepResult, counts: Counter) -> None:
        """Concat layout: the env's messages as template-delta tokens after the turn (or end the episode
        with `context` when they leave no room for one more token)."""
        closed = bool(action.token_ids) and action.token_ids[-1] == self._delta.eos
        try:
            env_ids = self._delta.tokens(res.messages, closed)
        except TemplateError as e:
            self._fail(ep, _EnvFailure("env_error", str(e)), counts)
            return
        if len(ep.stream()) + len(env_ids) >= self.max_context:
            ep.end = "context"
            return
        ep.turns[-1].env_ids = env_ids

    def _fail(self, ep: _Episode, failure: _EnvFailure, counts: Counter) -> None:
        ep.end = failure.kind
        self._warn(failure.kind, f"episode of item {ep.item.get('id')} failed ({failure.kind}): {failure} "
                                 "(dropped from the batch; counted in episodes/end/" + failure.kind + ")")  # fmt: skip

    def _warn(self, kind: str, msg: str) -> None:
        if kind not in self._warned:  # the first of each kind, not one line per episode
            self._warned.add(kind)
            log.warning(msg)

    def _batch(self, eps: list[_Episode], tok, ctx: RolloutContext) -> Rollouts:
        """concat: one row per episode (turns and env tokens); per_step: one row per turn, its prompt
        the context the engine saw. Every row carries its episode's id, return and step lists."""
        rows = []  # (episode index, prompt, [(turn index or -1, _Turn or env ids)], finish reason)
        for e, ep in enumerate(eps):
            if self._per_step:
                rows += [(e, tr.prompt, [(t, tr)], tr.finish) for t, tr in enumerate(ep.turns)]
            else:
                segs = [seg for t, tr in enumerate(ep.turns) for seg in ((t, tr), (-1, tr.env_ids))]
                rows.append((e, ep.prompt, segs, "stop" if ep.terminated else "length"))
        n = len(rows)
        width = max([1, *(sum(len(x.ids) if t >= 0 else len(x) for t, x in segs) for _, _, segs, _ in rows)])
        ids = torch.full((n, width), ctx.engine.pad_token_id, dtype=torch.long)
        mask, lp = torch.zeros(n, width), torch.zeros(n, width)
        turn = torch.full((n, width), -1, dtype=torch.long)
        ver = torch.full((n, width), ctx.policy_version, dtype=torch.long)
        has_ent = all(tr.entropies is not None for ep in eps for tr in ep.turns)
        ent = torch.zeros(n, width) if has_ent else None
        for i, (_, _, segs, _) in enumerate(rows):
            pos = 0
            for t, x in segs:
                toks = x.ids if t >= 0 else x
                k, end = len(toks), pos + len(toks)
                ids[i, pos:end] = torch.tensor(toks, dtype=torch.long)
                if t >= 0 and k:
                    mask[i, pos:end], turn[i, pos:end] = 1.0, t
                    lp[i, pos:end] = torch.tensor(x.logprobs)
                    ver[i, pos:end] = torch.tensor(x.versions, dtype=torch.long)
                    if ent is not None:
                        ent[i, pos:end] = torch.tensor(x.entropies)
                pos = end
        of = [eps[e] for e, _, _, _ in rows]
        # each row's item, plus its episode turn by turn (`transcript`: the messages with roles, each
        # assistant turn with its turn index, reward and finish reason), why it ended and its success
        views = [{**ep.item, **ep.columns, "transcript": ep.transcript, "episode_end": ep.end, "episode_success": ep.success}
                 for ep in eps]  # fmt: skip
        by_functions = self.rewards == "functions"  # unscored: the trainer's reward functions score each episode
        finals = [next((m["content"] for m in reversed(ep.transcript) if m["role"] == "assistant"), "") for ep in eps]
        return Rollouts(
            prompt_ids=[torch.tensor(p, dtype=torch.long) for _, p, _, _ in rows],
            completion_ids=ids, completion_mask=mask, behaviour_logprobs=lp,
            group=torch.tensor([ep.group for ep in of], dtype=torch.long),
            prompt_id=torch.tensor([int(ep.item["id"]) for ep in of], dtype=torch.long),
            finish_reason=[f for _, _, _, f in rows],
            rewards=None if by_functions else torch.tensor([[sum(ep.rewards)] for ep in of], dtype=torch.float32).reshape(n, 1),
            reward_names=() if by_functions else ("env_return",), entropies=ent, policy_version=ver,
            reward_text=[finals[e] for e, _, _, _ in rows] if by_functions else None,
            episode=torch.tensor([e for e, _, _, _ in rows], dtype=torch.long), turn=turn,
            step_rewards=[ep.rewards for ep in of], step_anchors=[ep.anchors for ep in of],
            step_agents=[ep.agents for ep in of], step_valid=[ep.valids for ep in of],
            items=[views[e] for e, _, _, _ in rows],
        ).validate()  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def _as_is(x: Any) -> Any:
    return x


_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _longest_token(tok) -> int:
    """The most characters one token of `tok` decodes to (bounded by the length of its longest token string:
    a byte-level token string has one character per byte), cached per tokenizer."""
    try:
        return _LONGEST[tok]
    except (KeyError, TypeError):
        pass
    n = len(tok)
    longest = max((len(t) for t in tok.convert_ids_to_tokens(list(range(n))) if isinstance(t, str)), default=1)
    longest = max(longest, *(len(t) for t in getattr(tok, "all_special_tokens", ()) or ("",)), 1)
    try:
        _LONGEST[tok] = longest
    except TypeError:
        pass
    return longest


def _metrics(episodes: list[_Episode], kept: list[_Episode], counts: Counter, env_times: list[float]) -> dict[str, float]:
    total = max(len(episodes), 1)
    out: dict[str, float] = {f"episodes/end/{k}": v / total for k, v in Counter(ep.end for ep in episodes).items()}
    out["episodes/count"] = float(len(episodes))
    out["episodes/failed"] = float(len(episodes) - len(kept))
    if kept:
        out["episodes/length_mean"] = sum(len(ep.rewards) for ep in kept) / len(kept)
        out["episodes/return_mean"] = out["reward/mean"] = sum(sum(ep.rewards) for ep in kept) / len(kept)
        judged = [ep.success for ep in kept if ep.success is not None]
        if judged:
            out["episodes/success_rate"] = sum(judged) / len(judged)
    turns = max(counts["turns"], 1)
    out["episodes/invalid_action_rate"] = counts["invalid"] / turns
    out["episodes/tool_calls_per_turn"] = counts["tool_calls"] / turns
    out["episodes/tool_malformed"] = float(counts["tool_malformed"])
    errors = max(counts["tool_errors"], counts["tool_malformed"])
    out["episodes/tool_error_rate"] = errors / counts["tool_calls"] if counts["tool_calls"] else 0.0
    if env_times:
        out["time/env_per_step"] = sum(env_times) / len(env_times)
        out["time/env_step_max"] = max(env_times)
    return out
