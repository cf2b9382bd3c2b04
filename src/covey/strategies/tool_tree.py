"""`tool_tree`: PORTool's tree rollouts over an environment that forks (covey.envs.base `fork`).

Paper: "PORTool: Tool-Use LLM Training with Rewarded Tree" (arXiv 2510.26020). RECONSTRUCTED: no code
was released; the procedure is the paper's as its abstract and secondary summaries give it:

    round 0:  n episodes of the item (the group size, one seed: the same start) take their first step;
    round r:  every unfinished trajectory forks into `branch` (f) candidates (`env.fork()`, one new turn
              each); exactly n - n_c of all candidates go on (n_c: trajectories finished so far), drawn
              uniformly at random (covey's choice: the paper does not say how); the rest are dropped,
              and a trajectory none of whose candidates was drawn ends there, unused;
    until every kept trajectory ended (the env's end, `max_turns`, the context, invalid turns).

So n trajectories come back, and those that share their first steps form a tree. Each is one episode
of the batch (layout concat: one row; per_step: one row per turn), built exactly as the `episodes`
strategy builds rows (covey.strategies.episodes); `Rollouts.tree_path` holds the node id of each of its
turns (a shared step has one id in every trajectory through it), and each assistant turn of the
`transcript` its tool calls and tool errors (what PORTool's step reward reads: `portool_provisional`).
f = 1 gives plain `episodes`. Metrics: ``tool_tree/candidates`` (turns generated), ``tool_tree/kept``
(turns in the tree), ``tool_tree/nodes_shared_frac`` (tree nodes on two trajectories or more).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from covey.envs.base import fork_env
from covey.rollouts import Rollouts
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy
from covey.strategies.episodes import Episodes, _EnvFailure, _Episode, _metrics

__all__ = ["ToolTree"]

_FAILED = ("env_error", "env_timeout")


@dataclass
class _Node(_Episode):
    path: tuple = ()  # the node id of each turn, root to this trajectory's last turn


@register_strategy("tool_tree")
class ToolTree(Episodes):
    """PORTool tree rollouts: n trajectories per item that share their first steps (module docstring)."""

    caps = StrategyCaps(takes_env=True, env_reward=True, provides=("tree_path",))

    def __init__(self, *, env: dict, branch: int = 2, max_turns: int = 8, max_context_tokens: int = 1024,
                 max_invalid: int = 3, step_timeout_s: float = 30.0, layout: Literal["auto", "concat", "per_step"] = "auto",
                 env_workers: int | None = None):  # fmt: skip
        super().__init__(env=env, max_turns=max_turns, max_context_tokens=max_context_tokens, max_invalid=max_invalid,
                         step_timeout_s=step_timeout_s, layout=layout, env_workers=env_workers)  # fmt: skip
        if type(branch) is not int or branch < 1:
            raise ValueError(f"tool_tree: branch must be an integer >= 1 (candidates per trajectory and turn), got {branch!r}")
        self.branch = branch
        probe = self.new_env()
        try:
            forks = callable(getattr(probe, "fork", None))
        finally:
            probe.close()
        if not forks:
            raise ValueError(f"tool_tree branches trajectories with env.fork(): environment {self.env_name!r} has no fork() "
                             "(add one that returns a deep copy, or use rollout.strategy episodes)")  # fmt: skip

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        counts: Counter = Counter()
        env_times: list[float] = []
        base_seed = ctx.sampling(0).seed or 0
        rng = random.Random(base_seed)
        ids = iter(range(1 << 62))
        roots = [_Node(env=None, item=d.item, group=g, prompt=[], max_new_tokens=d.max_new_tokens)
                 for g, d in enumerate(ctx.draws) for _ in range(d.n)]  # fmt: skip
        self._reset(roots, base_seed, tok, counts, env_times)
        want = [d.n for d in ctx.draws]
        done: list[_Node] = [r for r in roots if r.end is not None]
        live = [r for r in roots if r.end is None]
        for turn in range(self.max_turns):
            before = live
            live, prompts = self._live(live, tok)  # a trajectory with no room left ends here (context)
            done += [c for c in before if c.end is not None]
            cands, prompts = self._live(self._fork(live, counts), tok) if turn else (live, prompts)
            if not cands:
                live = []
                break
            for c in cands:
                c.path = c.path + (next(ids),)
            counts["candidates"] += len(cands)
            actions = self._generate(cands, prompts, ctx, turn, counts)
            for c, action, (res, secs) in zip(cands, actions, self._step_envs(cands, actions)):
                env_times.append(secs)
                if not isinstance(res, _EnvFailure):
                    c.transcript[-1].update(tool_calls=int(res.info.get("tool_calls", 0)), tool_errors=int(res.info.get("tool_errors", 0)))
                self._record(c, action, res, turn, counts)
            live = []
            for g in range(len(ctx.draws)):  # keep n - n_c of the group's candidates (all of them in round 0)
                mine = [c for c in cands if c.group == g]
                budget = max(want[g] - sum(x.group == g for x in done), 0)
                chosen = set(rng.sample(range(len(mine)), min(budget, len(mine)))) if turn else set(range(len(mine)))
                for i, c in enumerate(mine):
                    if i not in chosen:
                        self._close([c.env])
                    elif c.end is not None:
                        done.append(c)
                    else:
                        live.append(c)
        for c in live:  # still going when the loop stopped
            c.end = c.end or "max_turns"
            done.append(c)
        self._close([c.env for c in done if c.env is not None])
        kept = [c for c in done if c.end not in _FAILED and c.rewards]
        batch = self._batch(kept, tok, ctx)
        batch.tree_path = [kept[e].path for e in batch.episode.tolist()]
        metrics = _metrics(kept, kept, counts, env_times)
        metrics.update(_tree_metrics(kept, counts))
        metrics["episodes/per_step_layout"] = float(self._per_step)
        return batch.validate(), metrics

    def _fork(self, live: list[_Node], counts: Counter) -> list[_Node]:
        """`branch` candidates per live trajectory: forks of its env (the last candidate keeps the env itself)."""
        out = []
        for node in live:
            for b in range(self.branch):
                try:
                    env = node.env if b == self.branch - 1 else fork_env(node.env)
                except Exception as e:  # noqa: BLE001 - an env that cannot fork loses this candidate, not the run
                    counts["fork_failed"] += 1
                    self._warn("fork", f"tool_tree: {self.env_name!r} fork() failed ({type(e).__name__}: {e}): "
                                       "fewer candidates (counted in tool_tree/fork_failed)")  # fmt: skip
                    continue
                out.append(_copy_node(node, env))
        return out


def _copy_node(node: _Node, env: Any) -> _Node:
    """A candidate continuing `node` in `env`: every field of `node`, with its own copy of each list (the
    `_Turn`s themselves are shared: a turn never changes once the next one is generated)."""
    lists = {f.name: [dict(x) if isinstance(x, dict) else x for x in getattr(node, f.name)]
             for f in fields(node) if isinstance(getattr(node, f.name), list)}  # fmt: skip
    return replace(node, env=env, **lists)


def _tree_metrics(kept: list[_Node], counts: Counter) -> dict[str, float]:
    uses: Counter = Counter(n for c in kept for n in c.path)
    return {"tool_tree/candidates": float(counts["candidates"]), "tool_tree/kept": float(len(uses)),
            "tool_tree/fork_failed": float(counts["fork_failed"]),
            "tool_tree/nodes_shared_frac": sum(v > 1 for v in uses.values()) / max(len(uses), 1)}  # fmt: skip
