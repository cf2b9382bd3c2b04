"""`verifiers`: episodes of prime-intellect `verifiers` environments, token-exact, scored by their rubric.

A verifiers environment owns its loop: ``env.rollout(input, client, model, sampling_args)`` asks the
client for each turn and steps itself; ``env.rubric.score_group(states)`` scores a group. This
strategy runs the G episodes of every drawn item (`Draw.n`; items from the `verifiers` task,
`covey.envs.verifiers_adapter`) as asyncio tasks with covey's engine as the client
(`covey.envs.verifiers_client.EngineClient`). A batcher collects the turns the episodes ask for and
sends them to the engine in ONE `generate` call once every live episode waits (or `batch_wait_s`
after the first request, when an environment is slow), round r of `ctx.sampling` for the r-th call,
so a deterministic environment gives the same batches on a resumed run. Each turn's budget is
``min(sampling.max_new_tokens, the draw's max_new_tokens, the env's max_tokens, max_context_tokens -
prompt)``; a prompt that leaves no room ends its episode (verifiers' ``prompt_too_long``).

Rows, as prime-rl builds its training samples from verifiers' trajectory tokens: an episode's turns
go into one row as long as each turn's prompt ids extend the previous turn's prompt + sampled ids
(always, with a template that appends turns): row = first prompt + turn 0 sampled ids (mask 1) + the
ids the next prompt adds (environment / tool messages and the template's glue, mask 0) + turn 1
sampled ids (mask 1) + ...; a turn whose prompt does not extend (the environment rewrote the
conversation, or the template rewrites earlier turns) starts a new row of the same episode. The
trained tokens are exactly the sampled ids with the engine's log-probs (tested).

Reward: the rubric's ``state["reward"]``, one column `env_return`; as step rewards for step-level
estimators the episode's turns get 0 and the last turn the reward (anchors None). Episodes whose
rollout raised, set ``state["error"]`` or ran past `rollout_timeout_s` are dropped and counted
(`verifiers/failed`); the rest of the group is scored without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import torch

from covey.envs.verifiers_adapter import load_env, require_verifiers, rollout_input
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["VerifiersRollout", "episode_rows"]

log = logging.getLogger(__name__)


@dataclass
class _Request:
    episode: int
    prompt: list[int]
    cap: int | None
    future: asyncio.Future


class _Batcher:
    """Turns of concurrent episodes -> one engine call per round."""

    def __init__(self, ctx: RolloutContext, max_context: int, wait_s: float):
        self.ctx, self.max_context, self.wait_s = ctx, max_context, wait_s
        self.pending: list[_Request] = []
        self.round = 0  # engine calls so far
        self.turns = 0  # turns generated so far
        self.extras: dict[str, tuple[list[float] | None, list[int]]] = {}  # response id -> (entropies, versions)
        self._wake = asyncio.Event()

    async def generate(self, episode: int, prompt: list[int], cap: int | None):
        """Queue one turn of an episode; returns its `Native` response, or None when the prompt leaves
        no room."""
        if self.max_context - len(prompt) < 1:
            return None
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(episode, prompt, cap, fut))
        self._wake.set()
        return await fut

    async def serve(self, tasks: list[asyncio.Task]) -> None:
        """Run until every episode task is done: generate when all live episodes wait, or `wait_s`
        after the last request when some do not (a slow environment)."""
        while True:
            self.pending = [r for r in self.pending if not r.future.done()]  # timed-out episodes' turns
            live = [t for t in tasks if not t.done()]
            if not live:
                return
            if self.pending and len(self.pending) >= len(live):
                self._flush()
                continue
            self._wake.clear()
            waiter = asyncio.ensure_future(self._wake.wait())
            done, _ = await asyncio.wait([waiter, *live], timeout=self.wait_s, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if not done and self.pending:
                self._flush()

    def _flush(self) -> None:
        from covey.envs.verifiers_client import Native

        # in episode order, whatever order the episodes' tasks resumed in (verifiers uses threads)
        batch, self.pending = sorted(self.pending, key=lambda r: r.episode), []
        ctx, sp = self.ctx, self.ctx.sampling(self.round)
        self.round += 1
        budgets = tuple(min(sp.max_new_tokens, r.cap or sp.max_new_tokens, self.max_context - len(r.prompt)) for r in batch)
        call = sp if all(b == sp.max_new_tokens for b in budgets) else replace(sp, prompt_max_new_tokens=budgets)
        gen = ctx.engine.generate([r.prompt for r in batch], 1, call)
        for i, (r, k) in enumerate(zip(batch, gen.lengths.tolist())):
            ids = gen.completion_ids[i, :k].tolist()
            rid = f"covey-{self.turns}"
            self.turns += 1
            ent = gen.entropies[i, :k].tolist() if gen.entropies is not None else None
            ver = gen.policy_version[i, :k].tolist() if gen.policy_version is not None else [ctx.policy_version] * k
            self.extras[rid] = (ent, ver)
            text = ctx.tokenizer.decode(ids, skip_special_tokens=True)
            r.future.set_result(Native(rid, list(r.prompt), ids, gen.logprobs[i, :k].tolist(), gen.finish_reason[i], text))


def episode_rows(steps: list[dict]) -> list[tuple[list[int], list[tuple[int, list[int], list[float] | None, str]]]]:
    """An episode's trajectory steps (verifiers' ``step["tokens"]``) -> rows (prompt ids, segments).

    A segment is (turn, ids, logprobs, response id): turn >= 0 for sampled ids, -1 for the ids a
    turn's prompt adds after the row so far (logprobs None). A step whose prompt ids do not extend
    the row so far starts a new row."""
    rows: list = []
    full: list[int] = []
    for t, step in enumerate(steps):
        tok = step["tokens"]
        p, c = list(tok["prompt_ids"]), list(tok["completion_ids"])
        if rows and len(p) >= len(full) and p[: len(full)] == full:
            added = p[len(full) :]
            if added:
                rows[-1][1].append((-1, added, None, ""))
        else:
            rows.append((p, []))
            full = list(p)
        rows[-1][1].append((t, c, list(tok["completion_logprobs"]), step["response"].id))
        full = p + c
    return rows


@register_strategy("verifiers")
class VerifiersRollout:
    """Episodes of the `verifiers` task's environment (see the module docstring)."""

    caps = StrategyCaps(env_reward=True, task="verifiers")  # the environment is the task and scores the episodes

    def __init__(self, *, max_context_tokens: int = 2048, rollout_timeout_s: float = 600.0, batch_wait_s: float = 0.5):
        require_verifiers()  # one line before any model loads when the extra is missing
        if max_context_tokens < 2 or not rollout_timeout_s > 0 or not batch_wait_s > 0:
            raise ValueError("verifiers: need max_context_tokens >= 2, rollout_timeout_s > 0, batch_wait_s > 0 "
                             f"(got {max_context_tokens}, {rollout_timeout_s}, {batch_wait_s})")  # fmt: skip
        self.max_context, self.timeout, self.wait_s = max_context_tokens, float(rollout_timeout_s), float(batch_wait_s)
        self._warned: set[str] = set()

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        for d in ctx.draws:
            if "vf_env" not in d.item:
                raise ValueError("rollout.strategy verifiers needs the verifiers task: task: {name: verifiers, env: ...}")
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(self._run(ctx))
        finally:
            loop.close()

    async def _run(self, ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        from covey.envs.verifiers_client import EngineClient

        batcher = _Batcher(ctx, self.max_context, self.wait_s)
        client = EngineClient(batcher, ctx.tokenizer)
        episodes = []  # (group, env, item, task)
        for g, d in enumerate(ctx.draws):
            env = load_env(d.item["vf_env"])
            args = {**(getattr(env, "sampling_args", None) or {})}
            if d.max_new_tokens:
                args["max_tokens"] = min(d.max_new_tokens, args.get("max_tokens") or d.max_new_tokens)
            for _ in range(d.n):  # the episode's index rides in its sampling args (the client takes it out)
                run = env.rollout(rollout_input(d.item), client, "covey", {**args, "covey_episode": len(episodes)})
                coro = asyncio.wait_for(run, self.timeout)
                episodes.append((g, env, d.item, asyncio.ensure_future(coro)))
        await batcher.serve([t for *_, t in episodes])
        counts: Counter = Counter()
        states: list[tuple[int, dict, Any]] = []
        for g, env, item, task in episodes:
            if task.exception() is not None:
                e = task.exception()
                kind = "timeout" if isinstance(e, asyncio.TimeoutError) else "error"
                counts[kind] += 1
                self._warn(kind, f"verifiers: an episode of item {item.get('id')} failed ({kind}): {type(e).__name__}: {e}")
                continue
            state = task.result()
            if state.get("error") is not None:
                counts["error"] += 1
                self._warn("error", f"verifiers: an episode of item {item.get('id')} ended with {state['error']!r}")
                continue
            states.append((g, item, state))
        kept = await self._score(states, ctx, counts)
        metrics = self._metrics(len(episodes), kept, counts, client.counts, batcher.round)
        return self._batch(kept, batcher, ctx), metrics

    async def _score(self, states, ctx: RolloutContext, counts: Counter) -> list[tuple[int, dict, Any]]:
        kept = []
        for g in range(len(ctx.draws)):
            group = [s for s in states if s[0] == g]
            if not group:
                continue
            env = load_env(group[0][1]["vf_env"])
            try:
                await env.rubric.score_group([s for *_, s in group])
                for *_, s in group:
                    await env.rubric.cleanup(s)
            except Exception as e:  # noqa: BLE001 - a rubric bug fails its group, not the run
                counts["error"] += len(group)
                self._warn("score", f"verifiers: scoring the group of item {group[0][1].get('id')} raised "
                                    f"{type(e).__name__}: {e}")  # fmt: skip
                continue
            kept += [s for s in group if s[2]["trajectory"] and all(st["tokens"] is not None for st in s[2]["trajectory"])]
        return kept

    def _batch(self, kept, batcher: _Batcher, ctx: RolloutContext) -> Rollouts:
        rows = []  # (episode index, group, item view, prompt, segments, finish, reward, n turns)
        for e, (g, item, state) in enumerate(kept):
            steps = state["trajectory"]
            reward = float(state["reward"] or 0.0)
            view = {**item, "transcript": _transcript(state), "episode_end": state.get("stop_condition"),
                    "episode_success": None}  # fmt: skip
            finish = "length" if state.get("is_truncated") else "stop"
            for prompt, segs in episode_rows(steps):
                rows.append((e, g, view, prompt, segs, finish, reward, len(steps)))
        n = len(rows)
        width = max([1, *(sum(len(s[1]) for s in r[4]) for r in rows)])
        ids = torch.full((n, width), ctx.engine.pad_token_id, dtype=torch.long)
        mask, lp = torch.zeros(n, width), torch.zeros(n, width)
        turn = torch.full((n, width), -1, dtype=torch.long)
        ver = torch.full((n, width), ctx.policy_version, dtype=torch.long)
        has_ent = all(batcher.extras[s[3]][0] is not None for r in rows for s in r[4] if s[0] >= 0)
        ent = torch.zeros(n, width) if has_ent else None
        for i, (_, _, _, _, segs, _, _, _) in enumerate(rows):
            pos = 0
            for t, toks, lps, rid in segs:
                end = pos + len(toks)
                ids[i, pos:end] = torch.tensor(toks, dtype=torch.long)
                if t >= 0 and toks:
                    entropies, versions = batcher.extras[rid]
                    mask[i, pos:end], turn[i, pos:end] = 1.0, t
                    lp[i, pos:end] = torch.tensor(lps)
                    ver[i, pos:end] = torch.tensor(versions, dtype=torch.long)
                    if ent is not None:
                        ent[i, pos:end] = torch.tensor(entropies)
                pos = end
        step_rewards = [[0.0] * (r[7] - 1) + [r[6]] for r in rows]
        return Rollouts(
            prompt_ids=[torch.tensor(r[3], dtype=torch.long) for r in rows],
            completion_ids=ids, completion_mask=mask, behaviour_logprobs=lp,
            group=torch.tensor([r[1] for r in rows], dtype=torch.long),
            prompt_id=torch.tensor([int(r[2]["id"]) for r in rows], dtype=torch.long),
            finish_reason=[r[5] for r in rows],
            rewards=torch.tensor([[r[6]] for r in rows], dtype=torch.float32).reshape(n, 1),
            reward_names=("env_return",), entropies=ent, policy_version=ver,
            episode=torch.tensor([r[0] for r in rows], dtype=torch.long), turn=turn,
            step_rewards=step_rewards, step_anchors=[[None] * r[7] for r in rows],
            items=[r[2] for r in rows],
        ).validate()  # fmt: skip

    @staticmethod
    def _metrics(total: int, kept, counts: Counter, client_counts: dict, calls: int) -> dict[str, float]:
        out = {"episodes/count": float(total), "verifiers/failed": float(total - len(kept)),
               "verifiers/timeout": float(counts["timeout"]), "verifiers/error": float(counts["error"]),
               "verifiers/rendered_turns": float(client_counts["rendered"]),
               "episodes/tool_calls": float(client_counts["tool_calls"]),
               "episodes/tool_malformed": float(client_counts["tool_malformed"])}  # fmt: skip
        if kept:
            out["episodes/length_mean"] = sum(len(s["trajectory"]) for *_, s in kept) / len(kept)
            out["episodes/return_mean"] = out["reward/mean"] = sum(float(s["reward"] or 0) for *_, s in kept) / len(kept)
            out["episodes/turns_per_engine_call"] = sum(len(s["trajectory"]) for *_, s in kept) / max(calls, 1)
            for name, value in Counter(str(s.get("stop_condition")) for *_, s in kept).items():
                out[f"episodes/end/{name}"] = value / total
        return out

    def _warn(self, kind: str, msg: str) -> None:
        if kind not in self._warned:  # the first of each kind, not one line per episode
            self._warned.add(kind)
            log.warning(msg)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def _transcript(state) -> list[dict]:
    """The episode turn by turn with roles (samples.jsonl): the prompt, then each turn's messages."""
    out = [_message(m) for m in state["prompt"]]
    seen = len(state["prompt"])
    for t, step in enumerate(state["trajectory"]):
        new = list(step["prompt"])[seen:]
        out += [{**_message(m), "turn": t - 1} for m in new]
        out += [{**_message(m), "turn": t, "finish_reason": step["response"].message.finish_reason} for m in step["completion"]]
        seen = len(step["prompt"]) + len(step["completion"])
    final = state.get("completion") or []
    return out + [{**_message(m), "turn": len(state["trajectory"]) - 1} for m in list(final)[seen - len(state["prompt"]) :]]


def _message(m) -> dict:
    d = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
    return {k: v for k, v in d.items() if k in ("role", "content", "tool_calls", "tool_call_id")}
