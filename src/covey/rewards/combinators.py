"""Reward combinators: rewards built from other rewards (each a registered name or import path with params).

`staged`: a stage-gated reward, PRS's progressive reward shaping (arXiv 2512.07478).

Named `staged`, not `prs` (PRS is also Dr. Kernel's profiling-based rejection sampling). Reconstructed:
the paper's code is not released (searched 2026-11-24); the abstract says the reward is given in stages
(first parseable, well-formed tool calls, then factual correctness and answer quality); the gating rule is
the spec's design:

    r = r_1 + 1[r_1 >= g_1] * (r_2 + 1[r_2 >= g_2] * (r_3 + ...))

Each stage is any reward (a registered name or import path, with its params) and a gate g_k (default
1.0: the stage must be fully satisfied). A stage is asked only about the rows that passed every earlier
gate (a judge in a later stage is not asked about malformed answers), except a group-aware stage, which
sees every row (its units must stay whole). A stage that returns None for a row (does not apply) adds 0
and closes the gate for that row. Inner rewards that need the trainer's engine or state (a `policy`
judge, `mpo`) make the combinator run in the trainer's process too. Metrics: ``stage<k>/mean`` (over the rows asked) and
``stage<k>/pass_frac`` (over all rows).

`switch`: one reward per kind of item, chosen by an item column -- URPO's mixed batches (arXiv 2507.17515:
verifiable problems, preference data and open-ended instructions in one GRPO loop, the open ones judged by
the policy itself through the `policy` judge backend). Design (URPO's code is not released):

    r_i = cases[item_i[column]](row i)      rows of one kind are scored together, in one call of that case
          a kind with no case -> default (none: the reward does not apply, None; or a number)

Metrics: ``<kind>/mean`` per case. A case that needs the trainer's engine (a `policy` judge) makes the
switch need it too (it forwards `set_context`), and keeps it in the trainer's process.

`noisy_channel`: a binary reward passed through a noisy verifier channel, the setting of "Reinforcement
Learning with Verifiable yet Noisy Rewards under Imperfect Verifiers" (arXiv 2510.00915): a pass (>= 0.5)
is reported as 0 with probability rho1 (a false negative), a fail as 1 with probability rho0 (a false
positive). The coin of a row is a hash of (seed, prompt, completion, its repeat count among equal rows
of the call), so a row gets the same verdict whenever it is scored (resumed runs, re-scored chunks).
For studies of the `noisy_verifier` corrections; never a reward to train on for real.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from typing import Any

from covey.rewards._scoring import RewardOutput, _await
from covey.rewards.registry import get_reward, register_reward, reward_caps

__all__ = ["NoisyChannel", "StagedReward", "SwitchReward"]


def _accepts(fn) -> set[str] | None:
    """The column names a stage takes (None: any, it has **kwargs), as the runner passes them."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return None if any(p.kind is p.VAR_KEYWORD for p in params) else {p.name for p in params}


def _forward_context(fns, context: dict) -> None:
    """The trainer's engine context, to the inner rewards that need it (a `policy` judge)."""
    for fn in fns:
        if reward_caps(fn).needs_engine:
            fn.set_context(**context)


@register_reward("staged")
class StagedReward:
    """stages: [{name, params, gate}, ...] -- at least two; gate defaults to 1.0 (the last stage's is unused)."""

    def __init__(self, stages: list[dict[str, Any]]):
        if not isinstance(stages, list) or len(stages) < 2:
            raise ValueError("staged: stages must be a list of at least two {name, params, gate} entries")
        self.stages = []
        for k, st in enumerate(stages):
            if not isinstance(st, dict) or "name" not in st or set(st) - {"name", "params", "gate"}:
                raise ValueError(f"staged: stages[{k}] must be {{name, params, gate}}, got {st!r}")
            gate = float(st.get("gate", 1.0))
            if not math.isfinite(gate):
                raise ValueError(f"staged: stages[{k}].gate must be finite")
            fn = get_reward(st["name"], **(st.get("params") or {}))
            self.stages.append((fn, gate, _accepts(fn)))
        caps = [reward_caps(fn) for fn, _, _ in self.stages]
        self.group_aware = any(c.group_aware for c in caps)
        self.needs_engine = any(c.needs_engine for c in caps)
        self.in_process = self.needs_engine or any(c.in_process for c in caps)
        self.__name__ = "staged"

    def set_context(self, **context) -> None:
        _forward_context([fn for fn, _, _ in self.stages], context)

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        n = len(completions)
        total = [0.0] * n
        open_rows = list(range(n))
        metrics: dict[str, list[float]] = {}
        for k, (fn, gate, accepts) in enumerate(self.stages, start=1):
            if not open_rows:
                metrics[f"stage{k}/pass_frac"] = [0.0] * n
                continue
            rows = list(range(n)) if reward_caps(fn).group_aware else open_rows
            sub = {name: [col[i] for i in rows] for name, col in columns.items() if accepts is None or name in accepts}
            out = _await(fn(prompts=[prompts[i] for i in rows], completions=[completions[i] for i in rows], **sub))
            vals = list(getattr(out, "scores", out))
            if len(vals) != len(rows):
                raise ValueError(f"staged: stage {k} returned {len(vals)} scores for {len(rows)} completions")
            got = dict(zip(rows, vals))
            asked = [got[i] for i in open_rows if got[i] is not None]
            if asked:
                metrics[f"stage{k}/mean"] = [float(v) for v in asked]
            passed = []
            for i in open_rows:
                v = got[i]
                if v is None:
                    continue
                total[i] += float(v)
                if float(v) >= gate:
                    passed.append(i)
            keep = set(passed)
            metrics[f"stage{k}/pass_frac"] = [float(i in keep) for i in range(n)]
            open_rows = passed
        return RewardOutput(total, metrics)


@register_reward("switch")
class SwitchReward:
    """column (kind): the item column naming each row's kind; cases: {kind: {name, params}};
    default: none (None: the reward does not apply) or a number for kinds without a case."""

    def __init__(self, cases: dict[str, dict[str, Any]], column: str = "kind", default: Any = "none"):
        if not isinstance(cases, dict) or not cases:
            raise ValueError("switch: cases must map each kind to {name, params}")
        self.cases = {}
        for kind, spec in cases.items():
            if not isinstance(spec, dict) or "name" not in spec or set(spec) - {"name", "params"}:
                raise ValueError(f"switch: cases[{kind!r}] must be {{name, params}}, got {spec!r}")
            fn = get_reward(spec["name"], **(spec.get("params") or {}))
            self.cases[str(kind)] = (fn, _accepts(fn))
        if default != "none" and not (isinstance(default, (int, float)) and math.isfinite(default)):
            raise ValueError(f"switch: default must be none or a finite number, got {default!r}")
        self.column, self.default = column, None if default == "none" else float(default)
        caps = [reward_caps(fn) for fn, _ in self.cases.values()]
        self.group_aware = any(c.group_aware for c in caps)
        self.needs_engine = any(c.needs_engine for c in caps)
        self.in_process = self.needs_engine or any(c.in_process for c in caps)
        self.__name__ = "switch"

    def set_context(self, **context) -> None:
        _forward_context([fn for fn, _ in self.cases.values()], context)

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        kinds = columns.get(self.column)
        if kinds is None:
            raise ValueError(f"switch needs the {self.column!r} column (each item's kind); the batch has {sorted(columns)}")
        n = len(completions)
        scores: list[float | None] = [self.default] * n
        metrics: dict[str, list[float]] = {}
        for kind, (fn, accepts) in self.cases.items():
            rows = [i for i in range(n) if str(kinds[i]) == kind]
            if not rows:
                continue
            sub = {name: [col[i] for i in rows] for name, col in columns.items() if accepts is None or name in accepts}
            out = _await(fn(prompts=[prompts[i] for i in rows], completions=[completions[i] for i in rows], **sub))
            vals = list(getattr(out, "scores", out))
            if len(vals) != len(rows):
                raise ValueError(f"switch: case {kind!r} returned {len(vals)} scores for {len(rows)} completions")
            for i, v in zip(rows, vals):
                scores[i] = v
            for name, vs in getattr(out, "metrics", {}).items():
                metrics[f"{kind}/{name}"] = list(vs)
            metrics[f"{kind}/mean"] = [float(v) for v in vals if v is not None]
        return RewardOutput(scores, {k: v for k, v in metrics.items() if v})


@register_reward("noisy_channel")
class NoisyChannel:
    """reward: {name, params} (a 0/1 reward); rho0: false-positive rate; rho1: false-negative rate; seed.

    >>> ch = NoisyChannel({"name": "format", "params": {"tags": ["answer"]}}, rho1=1.0)
    >>> ch(prompts=["q", "q"], completions=["<answer>4</answer>", "4"]).scores
    [0.0, 0.0]
    """

    def __init__(self, reward: dict[str, Any], rho0: float = 0.0, rho1: float = 0.0, seed: int = 0):
        if not isinstance(reward, dict) or "name" not in reward or set(reward) - {"name", "params"}:
            raise ValueError(f"noisy_channel: reward must be {{name, params}}, got {reward!r}")
        for key, v in (("rho0", rho0), ("rho1", rho1)):
            if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise ValueError(f"noisy_channel: {key} must be a probability in [0, 1], got {v!r}")
        self.fn = get_reward(reward["name"], **(reward.get("params") or {}))
        self.accepts = _accepts(self.fn)
        self.rho0, self.rho1, self.seed = float(rho0), float(rho1), int(seed)
        caps = reward_caps(self.fn)
        self.group_aware, self.needs_engine = caps.group_aware, caps.needs_engine
        self.in_process = caps.needs_engine or caps.in_process
        self.__name__ = "noisy_channel"

    def set_context(self, **context) -> None:
        _forward_context([self.fn], context)

    def _coin(self, prompt, completion, repeat: int) -> float:
        key = f"{self.seed}\x00{prompt!r}\x00{completion!r}\x00{repeat}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") / 2**64

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        sub = {name: col for name, col in columns.items() if self.accepts is None or name in self.accepts}
        out = _await(self.fn(prompts=prompts, completions=completions, **sub))
        clean = list(getattr(out, "scores", out))
        if len(clean) != len(completions):
            raise ValueError(f"noisy_channel: the inner reward returned {len(clean)} scores for {len(completions)} completions")
        seen: dict[tuple[str, str], int] = {}
        scores: list[float | None] = []
        flips = []
        for p, c, v in zip(prompts, completions, clean):
            if v is None:
                scores.append(None)
                continue
            key = (repr(p), repr(c))
            seen[key] = seen.get(key, -1) + 1
            u = self._coin(p, c, seen[key])
            passed = float(v) >= 0.5
            flip = u < (self.rho1 if passed else self.rho0)
            flips.append(float(flip))
            scores.append(float(passed != flip))
        return RewardOutput(scores, {"flipped": flips, "clean": [float(float(v) >= 0.5) for v in clean if v is not None]})
