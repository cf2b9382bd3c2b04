"""`selfplay`: games of several roles (covey.envs.roles), one policy playing every role.

Per drawn item, `Draw.n` games (the group size) with one seed. A game env declares its `roles` and
says after each step who acts next (``info["agent"]``) and in which conversation (``info["thread"]``,
default one per role). Each round, the conversation whose turn it is in every live game goes to the
engine in one `generate` call (the policy's; roles in `frozen_roles` go through the frozen snapshot,
`RolloutContext.reference_engine`, the run's starting weights); the env answers, and its messages go
to the conversation that acts next. A conversation is built and tokenised exactly as an `episodes`
episode (layouts concat and per_step, `TemplateDelta` env tokens, the same limits and failure
handling: covey.strategies.episodes), so every conversation is one row (concat) or one row per turn.

Rows and groups:

* each conversation of a trained role is an episode of the batch (`Rollouts.episode`), its turns'
  rewards are its own (`reward` of its steps plus the ``info["rewards"]`` credited to it) and its
  `step_agents` hold its role; frozen roles' conversations never enter the batch (they do not train);
* the group of a conversation is its role within the item's G games (``info["group"] = "game"`` when it
  opens: its role within its own game), so group-relative estimators normalise each role by itself;
* `thread_slots: {role: D}` aligns a role to D conversations per game (M-GRPO's trajectory alignment,
  arXiv 2511.13288): a game with more drops random ones, a game with fewer (but one or more) repeats
  random ones; a game with none contributes none.

`role_prompts: {role: text}` puts a role's own instruction in front of each of its conversations (into
its first system message, or as one). `max_turns` counts the turns of all roles of a game. Metrics:
the `episodes/*` ones over conversations, and ``selfplay/games``, ``selfplay/turns_mean``,
``selfplay/<role>/return_mean`` (frozen roles too), ``selfplay/<role>/rows``, ``selfplay/frozen_turns``.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from covey.envs.base import Action, Env, StepResult
from covey.envs.roles import check_role_names, env_roles
from covey.models.chat import render
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.strategies.episodes import Episodes, _EnvFailure, _Episode, _metrics

__all__ = ["SelfPlay"]

log = logging.getLogger(__name__)
_FAILED = ("env_error", "env_timeout")


@dataclass
class _Seat(_Episode):
    """One conversation of a game: an `_Episode` (its prompt, turns, rewards, messages) plus who plays it."""

    key: Hashable = None  # the thread id
    role: int = 0
    game: int = 0
    frozen: bool = False
    group_key: tuple = ()


@dataclass
class _Game:
    draw: int
    index: int
    item: dict
    env: Env | None = None
    seats: dict = field(default_factory=dict)  # thread id -> _Seat, in opening order
    next: Hashable = None  # the thread that acts next
    end: str | None = None
    terminated: bool = False
    turns: int = 0
    max_new_tokens: int | None = None  # the sampler's cap on each turn (Draw.max_new_tokens)


def _roles_feature(params: dict) -> tuple[str, ...]:
    """`roles` (covey.compat): the strategy plays a game of two roles or more. Without an env (listing the
    providers) it can."""
    if "env" not in params:
        return ("roles",)
    env = params["env"]
    try:
        roles = env_roles(env["name"], {k: v for k, v in env.items() if k != "name"})
    except Exception:  # noqa: BLE001 - a bad env is reported by the strategy's own check
        return ()
    return ("roles",) if len(roles) >= 2 else ()


@register_strategy("selfplay")
class SelfPlay(Episodes):
    """Games of several roles against the `env` environment: one conversation per role (or per thread the
    env opens), one row per conversation, one group per role."""

    caps = StrategyCaps(takes_env=True, env_reward=True, provides=_roles_feature,
                        needs_reference_engine=lambda p: bool(p.get("frozen_roles")))  # fmt: skip

    def __init__(self, *, env: dict, frozen_roles: list[str] | None = None, role_prompts: dict[str, str] | None = None,
                 thread_slots: dict[str, int] | None = None, max_turns: int = 8, max_context_tokens: int = 1024,
                 max_invalid: int = 3, step_timeout_s: float = 30.0, layout: Literal["auto", "concat", "per_step"] = "auto",
                 env_workers: int | None = None):  # fmt: skip
        super().__init__(env=env, max_turns=max_turns, max_context_tokens=max_context_tokens, max_invalid=max_invalid,
                         step_timeout_s=step_timeout_s, layout=layout, env_workers=env_workers)  # fmt: skip
        self.roles = env_roles(self.env_name, self.env_params)
        self.frozen = tuple(frozen_roles or ())
        check_role_names(self.env_name, self.roles, self.frozen, "selfplay frozen_roles")
        if set(self.frozen) >= set(self.roles):
            raise ValueError(f"selfplay frozen_roles: every role of {self.env_name!r} ({', '.join(self.roles)}) is frozen, "
                             "so nothing would train: leave at least one role out")  # fmt: skip
        self.role_prompts = dict(role_prompts or {})
        check_role_names(self.env_name, self.roles, self.role_prompts, "selfplay role_prompts")
        self.slots = dict(thread_slots or {})
        check_role_names(self.env_name, self.roles, self.slots, "selfplay thread_slots")
        for role, d in self.slots.items():
            if type(d) is not int or d < 1:
                raise ValueError(f"selfplay thread_slots: {role} must be an integer >= 1 (conversations per game), got {d!r}")

    # -------------------------------------------------------------------------------- the loop
    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        counts: Counter = Counter()
        env_times: list[float] = []
        base_seed = ctx.sampling(0).seed or 0
        draws = [(g, d) for g, d in enumerate(ctx.draws) for _ in range(d.n)]
        games = [_Game(draw=g, index=i, item=d.item, max_new_tokens=d.max_new_tokens) for i, (g, d) in enumerate(draws)]
        self._start(games, base_seed, tok, counts, env_times)
        frozen_ctx = self._frozen_context(ctx)
        for rnd in range(self.max_turns):
            acting = self._acting(games, tok)
            if not acting:
                break
            actions: list[Action | None] = [None] * len(acting)
            for frozen, c in ((False, ctx), (True, frozen_ctx)):
                idx = [i for i, (_, seat, _) in enumerate(acting) if seat.frozen == frozen]
                if idx:
                    out = self._generate([acting[i][1] for i in idx], [acting[i][2] for i in idx], c, rnd, counts)
                    for i, a in zip(idx, out):
                        actions[i] = a
                    counts["frozen_turns"] += len(idx) * frozen
            results = self._step_envs([seat for _, seat, _ in acting], actions)
            for (game, seat, _), action, (res, secs) in zip(acting, actions, results):
                env_times.append(secs)
                self._play(game, seat, action, res, rnd, tok, counts)
        self._close([g.env for g in games if g.env is not None])
        for g in games:
            for seat in g.seats.values():
                seat.end, seat.terminated = g.end or "max_turns", g.terminated
        played = [s for g in games if g.end not in _FAILED for s in g.seats.values() if s.turns]
        trained = [s for s in played if not s.frozen]
        rows = self._align(trained, games, base_seed, counts)
        ids = {key: i for i, key in enumerate(dict.fromkeys(s.group_key for s in rows))}
        for seat in rows:  # a group per (item, role), or per (game, role) for conversations opened with group "game"
            seat.group = ids[seat.group_key]
        every = [s for g in games for s in g.seats.values() if not s.frozen]
        metrics = _metrics(every, trained, counts, env_times)
        metrics.update(self._game_metrics(games, played, rows, counts))
        metrics["episodes/per_step_layout"] = float(self._per_step)
        return self._batch(rows, tok, ctx), metrics

    def _frozen_context(self, ctx: RolloutContext) -> RolloutContext:
        if not self.frozen:
            return ctx
        if ctx.reference_engine is None:  # the held-out eval has no frozen snapshot: the policy plays every role
            self._warn("no_reference", "selfplay: no frozen snapshot engine in this context (held-out evaluation): "
                                       f"the policy plays the frozen roles {', '.join(self.frozen)} too")  # fmt: skip
            return ctx
        return replace(ctx, engine=ctx.reference_engine)

    def _start(self, games: list[_Game], base_seed: int, tok, counts: Counter, env_times: list[float]) -> None:
        """Build and reset each game's env (`Episodes._reset`: group g's games get seed base_seed + g) and
        open the conversation of the role that acts first."""
        firsts = [_Seat(env=None, item=g.item, group=g.draw, prompt=[]) for g in games]
        self._reset(firsts, base_seed, tok, counts, env_times)
        for game, first in zip(games, firsts):
            game.env = first.env
            if first.end is not None:
                game.end = first.end
                continue
            if first.agent >= len(self.roles):
                self._fail_game(game, _EnvFailure("env_error", _check_game_info({"agent": first.agent}, self.roles)), counts)
                continue
            self._open(game, StepResult(first.messages, anchor=first.anchor, info={"agent": first.agent}), -1, tok, counts)

    def _acting(self, games: list[_Game], tok) -> list[tuple[_Game, _Seat, list[int]]]:
        """(game, the conversation whose turn it is, its prompt) of every live game; a game whose next
        prompt leaves no room to generate ends with `context`."""
        out = []
        for g in games:
            if g.end is not None:
                continue
            seat = g.seats[g.next]
            p = render(tok, seat.messages, generation_prompt=True, tools=self._tools) if self._per_step else seat.stream()
            if self.max_context - len(p) < 1:
                g.end = "context"
                continue
            out.append((g, seat, p))
        return out

    def _play(self, game: _Game, seat: _Seat, action: Action, res: StepResult | _EnvFailure, rnd: int, tok,
              counts: Counter) -> None:  # fmt: skip
        """The env's answer to one turn: the rewards (the actor's and the credited ones), whether the game
        ends, and otherwise the next conversation with its new messages."""
        counts["turns"] += 1
        game.turns += 1
        seat.rewards.append(0.0)
        seat.valids.append(False)  # a turn the env failed on is not a valid action (`Rollouts.step_valid`)
        if isinstance(res, _EnvFailure):
            return self._fail_game(game, res, counts)
        problem = _check_game_info(res.info, self.roles)
        if problem:
            return self._fail_game(game, _EnvFailure("env_error", problem), counts)
        for key, x in res.info.get("rewards", {}).items():  # a role that never acted has no turn to credit: dropped
            if key not in game.seats and key not in self.roles:
                return self._fail_game(game, _EnvFailure("env_error", f"info['rewards'] credits thread {key!r}, which "
                                                                      "never opened and is no role"), counts)  # fmt: skip
        seat.rewards[-1] = float(res.reward)
        seat.transcript[-1]["reward"] = float(res.reward)
        seat.messages.append({"role": "assistant", "content": action.text})
        for key, x in res.info.get("rewards", {}).items():
            other = game.seats.get(key)
            if other is not None and other.rewards:
                other.rewards[-1] += float(x)
        counts["tool_errors"] += int(res.info.get("tool_errors", 0))
        if "success" in res.info:
            seat.success = bool(res.info["success"])
        malformed_only = bool(action.tool_calls) and all(c.error is not None for c in action.tool_calls)
        invalid = res.info.get("valid") is False or malformed_only
        counts["invalid"] += invalid
        seat.valids[-1] = not invalid
        seat.invalid_streak = seat.invalid_streak + 1 if invalid else 0
        if res.terminated or res.truncated:
            game.end, game.terminated = ("terminated" if res.terminated else "truncated"), res.terminated
        elif seat.invalid_streak >= self.max_invalid:
            game.end = "invalid_streak"
        elif rnd + 1 == self.max_turns:
            game.end = "max_turns"
        else:
            self._open(game, res, rnd, tok, counts)

    def _open(self, game: _Game, res: StepResult, rnd: int, tok, counts: Counter) -> None:
        """The conversation that acts next (``info["agent"]``, ``info["thread"]``) gets the step's messages:
        a new one opens with them (behind its role prompt), an open one appends them after its last turn."""
        agent = res.info.get("agent", 0)
        key = res.info.get("thread", self.roles[agent] if agent < len(self.roles) else None)
        seat = game.seats.get(key)
        if seat is None:
            messages = self._with_role_prompt(agent, res.messages)
            if not self._may_fit(tok, messages, self.max_context):
                game.end = "context"
                return
            scope = (game.draw, agent) if res.info.get("group") != "game" else (game.draw, agent, "game", game.index)
            seat = _Seat(env=game.env, item={**game.item, "role": self.roles[agent], "game": game.index}, group=game.draw,
                         prompt=render(tok, messages, generation_prompt=True, tools=self._tools), messages=list(messages),
                         max_new_tokens=game.max_new_tokens, key=key, role=agent, game=game.index,
                         frozen=self.roles[agent] in self.frozen, group_key=scope, agent=agent)  # fmt: skip
            seat.transcript = [dict(m) for m in messages]
            game.seats[key] = seat
        elif seat.role != agent:
            return self._fail_game(game, _EnvFailure("env_error", f"thread {key!r} is role {self.roles[seat.role]!r}'s, "
                                                                  f"not {self.roles[agent]!r}'s"), counts)  # fmt: skip
        elif res.messages:
            room = self.max_context if self._per_step else self.max_context - len(seat.stream())
            if not self._may_fit(tok, res.messages, room):
                game.end = "context"
                return
            seat.messages += res.messages
            seat.transcript += [{**m, "turn": rnd} for m in res.messages]
            if not self._per_step:
                last = seat.turns[-1].ids if seat.turns else []
                self._append_env_tokens(seat, Action("", last), res, counts)
                if seat.end is not None:  # no room for the new messages: the whole game ends
                    game.end, seat.end = seat.end, None
                    return
        seat.anchor = res.anchor
        game.next = key

    def _with_role_prompt(self, agent: int, messages: list[dict]) -> list[dict]:
        text = self.role_prompts.get(self.roles[agent])
        if not text:
            return list(messages)
        if messages and messages[0]["role"] == "system":
            return [{"role": "system", "content": f"{text}\n{messages[0]['content']}"}, *messages[1:]]
        return [{"role": "system", "content": text}, *messages]

    def _fail_game(self, game: _Game, failure: _EnvFailure, counts: Counter) -> None:
        game.end = failure.kind
        self._warn(failure.kind, f"game of item {game.item.get('id')} failed ({failure.kind}): {failure} (its "
                                 f"conversations are dropped from the batch; counted in episodes/end/{failure.kind})")  # fmt: skip

    # -------------------------------------------------------------------------------- rows
    def _align(self, trained: list[_Seat], games: list[_Game], base_seed: int, counts: Counter) -> list[_Seat]:
        """The rows: every trained conversation, with each role of `thread_slots` aligned to D per game."""
        if not self.slots:
            return trained
        rng = random.Random(base_seed)
        by_game: dict[int, list[_Seat]] = {}
        for s in trained:
            by_game.setdefault(s.game, []).append(s)
        rows = []
        for g in games:
            seats = by_game.get(g.index, [])
            rows += [s for s in seats if self.roles[s.role] not in self.slots]
            for role, d in self.slots.items():
                mine = [s for s in seats if self.roles[s.role] == role]
                if len(mine) > d:
                    counts[f"dropped/{role}"] += len(mine) - d
                    mine = [mine[i] for i in sorted(rng.sample(range(len(mine)), d))]
                elif 0 < len(mine) < d:
                    counts[f"padded/{role}"] += d - len(mine)
                    mine = mine + [mine[rng.randrange(len(mine))] for _ in range(d - len(mine))]
                rows += mine
        return rows

    def _game_metrics(self, games: list[_Game], played: list[_Seat], rows: list[_Seat], counts: Counter) -> dict[str, float]:
        out = {"selfplay/games": float(len(games)), "selfplay/frozen_turns": float(counts["frozen_turns"]),
               "selfplay/failed_games": float(sum(g.end in _FAILED for g in games))}  # fmt: skip
        ok = [g for g in games if g.end not in _FAILED]
        if ok:
            out["selfplay/turns_mean"] = sum(g.turns for g in ok) / len(ok)
        for r, role in enumerate(self.roles):
            mine = [s for s in played if s.role == r]
            if mine:
                out[f"selfplay/{role}/return_mean"] = sum(sum(s.rewards) for s in mine) / len(mine)
            out[f"selfplay/{role}/rows"] = float(sum(s.role == r for s in rows))
            if role in self.slots:
                out[f"selfplay/{role}/padded"] = float(counts[f"padded/{role}"])
                out[f"selfplay/{role}/dropped"] = float(counts[f"dropped/{role}"])
        return out


def _check_game_info(info: dict, roles: tuple[str, ...]) -> str | None:
    """What is wrong with a game env's info (the next agent, the thread id, the credited rewards), or None."""
    agent = info.get("agent", 0)
    if agent >= len(roles):
        return f"info['agent'] = {agent} is not a role index (the env declares {len(roles)} roles: {', '.join(roles)})"
    key = info.get("thread")
    if key is not None and not isinstance(key, Hashable):
        return f"info['thread'] must be hashable, got {type(key).__name__}"
    credits = info.get("rewards", {})
    if not isinstance(credits, dict):
        return f"info['rewards'] must be a dict {{thread: reward}}, got {type(credits).__name__}"
    for k, x in credits.items():
        if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
            return f"info['rewards'][{k!r}] must be a finite number, got {x!r}"
    if info.get("group", "game") != "game":
        return f"info['group'] must be 'game' when given, got {info['group']!r}"
    return None
