"""`staged`: a stage-gated reward, PRS's progressive reward shaping (arXiv 2512.07478).

Named `staged`, not `prs` (PRS is also Dr. Kernel's profiling-based rejection sampling). Reconstructed:
the paper's code is not released (searched 2026-11-24); the abstract says the reward is given in stages
(first parseable, well-formed tool calls, then factual correctness and answer quality); the gating rule is
the spec's design (rewards-eval-diffusion §2.12):

    r = r_1 + 1[r_1 >= g_1] * (r_2 + 1[r_2 >= g_2] * (r_3 + ...))

Each stage is any reward (a registered name or import path, with its params) and a gate g_k (default
1.0: the stage must be fully satisfied). A stage is asked only about the rows that passed every earlier
gate (a judge in a later stage is not asked about malformed answers), except a group-aware stage, which
sees every row (its units must stay whole). A stage that returns None for a row (does not apply) adds 0
and closes the gate for that row. Metrics: ``stage<k>/mean`` (over the rows asked) and
``stage<k>/pass_frac`` (over all rows).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from covey.rewards._scoring import RewardOutput, _await
from covey.rewards.registry import get_reward, register_reward

__all__ = ["StagedReward"]


def _accepts(fn) -> set[str] | None:
    """The column names a stage takes (None: any, it has **kwargs), as the runner passes them."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return None if any(p.kind is p.VAR_KEYWORD for p in params) else {p.name for p in params}


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
        self.group_aware = any(getattr(fn, "group_aware", False) for fn, _, _ in self.stages)
        self.__name__ = "staged"

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        n = len(completions)
        total = [0.0] * n
        open_rows = list(range(n))
        metrics: dict[str, list[float]] = {}
        for k, (fn, gate, accepts) in enumerate(self.stages, start=1):
            if not open_rows:
                metrics[f"stage{k}/pass_frac"] = [0.0] * n
                continue
            rows = list(range(n)) if getattr(fn, "group_aware", False) else open_rows
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
