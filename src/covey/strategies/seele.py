"""`seele_provisional`: a prefix of the reference solution as a hint, its length fitted per problem so that
the rollout accuracy stays near the target (the "sweet spot").

Paper: "Staying in the Sweet Spot: Responsive Reasoning Evolution via Capability-Adaptive Hint Scaffolding"
(SEELE, arXiv 2509.06923). RECONSTRUCTED: no code was released (searched); what is confirmed (abstract,
the overview figure's caption, summaries): each step runs m rollout rounds; in round i the problem gets a
hint, the prefix y_{1:l(i)} of its full solution y, with l(i) from an accuracy-hint model fitted (item
response theory, a three-parameter logistic curve) to the (hint, accuracy) pairs of the preceding rounds
so as to hit the target accuracy a* (0.5: the loss-descent bound a(1 - a) is largest there); the advantage
is computed over the outputs of all m rounds. Covey's reading of what is not confirmed:

    hint ratio h in [0, 1]; hint = the first round(h x L) tokens of the solution (L its token length),
    appended to the question ("question\\n\\nhint"; for chat prompts the last user message): a part of
    the PROMPT, so no hint token is ever in the policy loss
    accuracy model (3PL):   a(h) = c + (1 - c) sigmoid(k (h - b))     c = `guess`, k = `discrimination`
    fit of b from the earlier rounds j of this step (h_j, s_j correct of n_j), closed form:
        acc_j = (s_j + 1/2) / (n_j + 1)                              (one half-success of smoothing)
        b     = sum_j n_j [h_j - logit(clip((acc_j - c) / (1 - c))) / k] / sum_j n_j
    next ratio: h = clip(b + logit((a* - c) / (1 - c)) / k, 0, 1)
    round 1: the ratio this problem ended its last step with (0 = `initial_ratio` when never seen)
    rows: G split over the m rounds (the first G mod m rounds one more); one group per problem over all rounds

The fitted curve has only b free (c and k are parameters): with one or two rounds of a few rollouts,
three free parameters are not identifiable, and the paper's fitting procedure is not known.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from covey.rollouts import Rollouts
from covey.samplers.base import Draw
from covey.samplers.groups import sample_groups
from covey.strategies._hints import with_hint
from covey.strategies.base import RolloutContext, register_strategy

__all__ = ["SEELE", "fit_difficulty", "next_ratio", "round_sizes"]

CORRECT = 0.5


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def fit_difficulty(points: list[tuple[float, int, int]], *, guess: float, discrimination: float) -> float:
    """b of the 3PL curve from (hint ratio, correct, trials) points (closed form, module docstring)."""
    num = den = 0.0
    for h, s, n in points:
        acc = (s + 0.5) / (n + 1)
        q = min(max((acc - guess) / (1 - guess), 1e-4), 1 - 1e-4)
        num += n * (h - _logit(q) / discrimination)
        den += n
    if den == 0:
        raise ValueError("fit_difficulty needs at least one round with trials")
    return num / den


def next_ratio(b: float, *, target: float, guess: float, discrimination: float) -> float:
    """The hint ratio the curve puts at accuracy `target`, clipped to [0, 1]."""
    return min(max(b + _logit((target - guess) / (1 - guess)) / discrimination, 0.0), 1.0)


def round_sizes(g: int, rounds: int) -> list[int]:
    """G rows over `rounds` rounds: G // rounds each, the first G mod rounds one more."""
    if g < rounds:
        raise ValueError(f"seele_provisional: a group of {g} rows cannot be split over {rounds} rounds (group_size >= rounds)")
    return [g // rounds + (i < g % rounds) for i in range(rounds)]


@register_strategy(
    "seele_provisional",
    paper="Staying in the Sweet Spot: Responsive Reasoning Evolution via Capability-Adaptive Hint Scaffolding",
    arxiv="2509.06923",
)  # fmt: skip
class SEELE:
    """SEELE's capability-adaptive hints, reconstructed (module docstring).

    rounds:          rollout rounds per step (m).
    target:          the accuracy the hint length aims at (a*).
    guess:           the curve's lower asymptote c (accuracy however long the hint is short).
    discrimination:  the curve's slope k (per unit of hint ratio).
    initial_ratio:   the first round's hint ratio for a problem never seen.
    solution_column: the item column with the full reference solution.
    """

    def __init__(self, *, rounds: int = 3, target: float = 0.5, guess: float = 0.0, discrimination: float = 10.0,
                 initial_ratio: float = 0.0, solution_column: str = "solution"):  # fmt: skip
        if rounds < 1 or discrimination <= 0 or not 0.0 <= guess < target < 1.0 or not 0.0 <= initial_ratio <= 1.0:
            raise ValueError("seele_provisional: need rounds >= 1, discrimination > 0, 0 <= guess < target < 1 and "
                             f"initial_ratio in [0, 1] (got {rounds}, {discrimination}, {guess}, {target}, {initial_ratio})")  # fmt: skip
        self.rounds, self.target, self.guess, self.k = rounds, target, guess, discrimination
        self.initial, self.solution = initial_ratio, solution_column
        self.last: dict[int, float] = {}  # item id -> the ratio its last step ended with

    def _hint(self, tok, item: dict, ratio: float) -> str:
        if self.solution not in item:
            raise ValueError(f"seele_provisional: item {item.get('id')!r} has no {self.solution!r} column (the reference "
                             "solution the hints are cut from); set solution_column")  # fmt: skip
        ids = list(tok.encode(str(item[self.solution]), add_special_tokens=False))
        return tok.decode(ids[: round(ratio * len(ids))], skip_special_tokens=True) if ids else ""

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok, draws = ctx.tokenizer, ctx.draws
        sizes = [round_sizes(d.n, self.rounds) for d in draws]
        ratios = [self.last.get(int(d.item["id"]), self.initial) for d in draws]
        points: list[list[tuple[float, int, int]]] = [[] for _ in draws]
        parts: list[Rollouts] = []
        metrics: dict[str, float] = {}
        for r in range(self.rounds):
            if r:
                ratios = [next_ratio(fit_difficulty(p, guess=self.guess, discrimination=self.k), target=self.target,
                                     guess=self.guess, discrimination=self.k) for p in points]  # fmt: skip
            hinted = [Draw(item={**d.item, "prompt": with_hint(d.item["prompt"], self._hint(tok, d.item, h))}, n=sizes[i][r],
                           max_new_tokens=d.max_new_tokens) for i, (d, h) in enumerate(zip(draws, ratios))]  # fmt: skip
            part = sample_groups(ctx.engine, tok, hinted, ctx.sampling(r))
            part.items = [draws[int(g)].item for g in part.group.tolist()]  # rewards read the original item
            ctx.score(part)
            ok = part.scalar_rewards() > CORRECT
            for i in range(len(draws)):
                rows = part.group == i
                points[i].append((ratios[i], int(ok[rows].sum()), int(rows.sum())))
            metrics[f"seele/round{r}_ratio"] = sum(ratios) / len(ratios)
            metrics[f"seele/round{r}_acc"] = float(ok.double().mean())
            parts.append(part)
        for d, h in zip(draws, ratios):
            self.last[int(d.item["id"])] = h
        batch = Rollouts.concat(parts) if len(parts) > 1 else parts[0]
        batch = batch.select(torch.argsort(batch.group, stable=True))  # one group per problem, rounds in order
        return batch, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"last": dict(self.last)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last = {int(k): float(v) for k, v in (state or {}).get("last", {}).items()}
