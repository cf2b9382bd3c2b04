"""ArenaRL tournament rewards (arXiv 2601.06487): completions of one group judged against each other.

Checked against the authors' code: Alibaba-NLP/qqr 944a2e2 ``qqr/reward_models/arena/{anchor,
round_robin,single_elimination}.py`` and 27027c3 ``qqr/examples/travel/reward_model.py`` (the
bidirectional judge). A match ``judge(p, q)`` asks the judge twice, in both orders, and sums:
``s_p = A(p, q) + B(q, p)``, ``s_q = B(p, q) + A(q, p)`` (A, B = the Agent_A / Agent_B scores of one reply).

    anchor              x_0 is the anchor: (o_i, a_i) = judge(x_i, x_0) for i >= 1; scores = [mean a_i, o_1, ...];
                        rank = min-rank, descending; r_i = (max_rank - rank_i) / (max_rank - 1), 0 if max_rank == 1
    round_robin         every pair once; +1 to the higher score, +0.5 each on a tie; ranked as above by wins
    single_elimination  seeded by the anchor pass (x_0's points: mean a_i); players ordered by mean points; the
                        standard seeded bracket for the next power of two, seeds >= G dropped; each round pairs
                        neighbours (a last unpaired player has a bye and goes first into the next round),
                        winner = s_1 >= s_2; every match adds both scores to the players' points; ranking =
                        champion, then the losers of each round from the last, ties of one round by mean
                        points; r_i = 1 - rank_i / (G - 1)
    then                z_i = (r_i - mean r) / (std_unbiased r + 1e-6)     (the reward is pre-normalised)

Departures: G = 1 gives 0.0 (the reference divides by zero). The anchor row is the group's first row;
the reference decodes it greedily (qqr 8653a9a ``qqr/rollout/agent_rollout.py``): use
``rollout.strategy: {name: group, greedy_first: true}`` (the reward `prefers` it: a warning otherwise). Double elimination and Swiss exist in qqr and are not built here. Judge failure (no parse after
the retries): ``on_fail: tie`` (default, the reference's ``return_on_failure=(5.0, 5.0)``) scores that
order ``(tie_score, tie_score)``; ``none`` fails the whole group (NaN, counted by the runner).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence

from covey.rewards._scoring import RewardOutput
from covey.rewards.judge.core import JudgeHolder, pairwise_judge
from covey.rewards.judge.reward import judge_metrics, prompt_text
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["TOPOLOGIES", "ArenaReward", "anchor", "min_rank", "round_robin", "single_elimination", "zscore"]

log = logging.getLogger(__name__)

# judge_pairs([(p, q), ...]) -> [(s_p, s_q), ...]: one batched round of bidirectional matches
PairJudge = Callable[[list[tuple[int, int]]], list[tuple[float, float]]]


def min_rank(scores: Sequence[float]) -> list[int]:
    """pandas ``rank(method="min", ascending=False)``: 1 + the number of strictly higher scores."""
    return [1 + sum(t > s for t in scores) for s in scores]


def _rank_rewards(scores: Sequence[float]) -> list[float]:
    ranks = min_rank(scores)
    top = max(ranks)
    return [0.0] * len(scores) if top == 1 else [(top - r) / (top - 1) for r in ranks]


def zscore(r: Sequence[float], eps: float = 1e-6) -> list[float]:
    """(r - mean) / (unbiased std + eps); a group of one gives [0.0]."""
    if len(r) < 2:
        return [0.0] * len(r)
    mean, std = statistics.fmean(r), statistics.stdev(r)
    return [(x - mean) / (std + eps) for x in r]


def anchor(g: int, judge_pairs: PairJudge) -> list[float]:
    """Rank rewards r (before the z-score) of the anchor topology."""
    if g < 2:
        return [0.0] * g
    res = judge_pairs([(i, 0) for i in range(1, g)])
    return _rank_rewards([statistics.fmean(a for _, a in res)] + [o for o, _ in res])


def round_robin(g: int, judge_pairs: PairJudge) -> list[float]:
    pairs = [(i, j) for i in range(g) for j in range(i + 1, g)]
    wins = [0.0] * g
    for (i, j), (si, sj) in zip(pairs, judge_pairs(pairs) if pairs else []):
        if si > sj:
            wins[i] += 1.0
        elif sj > si:
            wins[j] += 1.0
        else:
            wins[i] += 0.5
            wins[j] += 0.5
    return _rank_rewards(wins)


def seeded_bracket(order: Sequence[int]) -> list[int]:
    """Players (strongest first) placed in the standard seeded bracket; seeds past the group dropped."""
    size = 1
    while size < len(order):
        size *= 2
    b = [0]
    while len(b) < size:
        b = [x for i in b for x in (i, 2 * len(b) - 1 - i)]
    return [order[i] for i in b if i < len(order)]


def single_elimination(g: int, judge_pairs: PairJudge) -> list[float]:
    if g < 2:
        return [0.0] * g
    points: list[list[float]] = [[] for _ in range(g)]
    res = judge_pairs([(i, 0) for i in range(1, g)])  # seeding: the anchor pass
    for i, (o, _) in zip(range(1, g), res):
        points[i].append(o)
    points[0].append(statistics.fmean(a for _, a in res))

    def mean_points(i: int) -> float:
        return statistics.fmean(points[i]) if points[i] else 0.0

    active = seeded_bracket(sorted(range(g), key=mean_points, reverse=True))  # stable, as Python's sorted
    eliminated: list[list[int]] = []
    while len(active) > 1:
        pairs = [(active[k], active[k + 1]) for k in range(0, len(active) - 1, 2)]
        nxt = [active[-1]] if len(active) % 2 else []  # the bye goes first into the next round
        losers = []
        for (p, q), (sp, sq) in zip(pairs, judge_pairs(pairs)):
            points[p].append(sp)
            points[q].append(sq)
            win, lose = (p, q) if sp >= sq else (q, p)
            nxt.append(win)
            losers.append(lose)
        eliminated.append(losers)
        active = nxt
    ranking = list(active)
    for losers in reversed(eliminated):
        ranking.extend(sorted(losers, key=mean_points, reverse=True))
    r = [0.0] * g
    for rank, i in enumerate(ranking):
        r[i] = 1.0 - rank / (g - 1)
    return r


TOPOLOGIES = {"anchor": anchor, "round_robin": round_robin, "single_elimination": single_elimination}


@register_reward("arenarl")
class ArenaReward(JudgeHolder):
    """ArenaRL: a pairwise judge ranks each group's completions in a tournament; the reward is the
    group z-score of the rank (module docstring). Group-wise (one tournament per group) and
    pre-normalised: pair it with the `identity` advantage (or `dr_grpo`).

    topology:   single_elimination (the paper's headline scheme; default) | anchor (qqr's released
                travel config) | round_robin
    backend, template (default pairwise_scores, with {prompt}, {a}, {b}), parser (json_pair), decoding,
    parse_retries, cache_size / cache_file: as for the `judge` reward.
    on_fail:    tie (default: that order scores (tie_score, tie_score)) | none (the group fails: NaN)
    """

    group_aware = True
    prenormalized = True
    prefers = ("greedy_first",)  # covey.compat: the reference's anchor row is decoded greedily

    def __init__(self, backend, topology: str = "single_elimination", template: str = "pairwise_scores",
                 parser="json_pair", max_new_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
                 stop: list[str] | None = None, seed: int = 0, parse_retries: int = 1, retry_temperature: float = 0.7,
                 on_fail: str = "tie", tie_score: float = 5.0, cache_size: int = 8192, cache_file: str | None = None,
                 template_system: str | None = None):
        if topology not in TOPOLOGIES:
            raise ValueError(f"arenarl: topology must be one of {', '.join(TOPOLOGIES)}, got {topology!r}")
        if on_fail not in ("tie", "none"):
            raise ValueError(f"arenarl: on_fail must be tie or none, got {on_fail!r}")
        self.judge = pairwise_judge("arenarl", backend, template, parser, max_new_tokens=max_new_tokens,
                                    temperature=temperature, top_p=top_p, stop=tuple(stop or ()), seed=seed,
                                    parse_retries=parse_retries, retry_temperature=retry_temperature,
                                    cache_size=cache_size, cache_file=cache_file, template_system=template_system)
        self.topology, self.on_fail, self.tie_score = topology, on_fail, float(tie_score)
        self.__name__ = "arenarl"
        self._warned = False

    def _pair_judge(self, query: str, texts: list[str], stats: dict, why: list, ties: list) -> PairJudge:
        def judge_pairs(pairs):
            orders, w, s = self.judge.ask_both_orders([(query, texts[p], texts[q]) for p, q in pairs])
            for k, v in s.items():
                stats[k] = stats.get(k, 0.0) + v
            why.extend(w)
            tie = (self.tie_score, self.tie_score)
            out = []
            for ab, ba in orders:  # p's score: as A in order 1, as B in order 2
                ab, ba = ab or tie, ba or tie
                out.append((ab[0] + ba[1], ab[1] + ba[0]))
                ties.append(float(out[-1][0] == out[-1][1]))
            return out

        return judge_pairs

    def __call__(self, prompts, completions, group=None, **_) -> RewardOutput:
        if group is None:
            raise ValueError("arenarl needs the 'group' column (group ids of the completions); pass group=... to the runner")
        members: dict = {}
        for i, g in enumerate(group):
            members.setdefault(g, []).append(i)
        scores: list[float] = [0.0] * len(completions)
        stats: dict[str, float] = {}
        why: list[str | None] = []
        ties: list[float] = []
        for idx in members.values():
            texts = [completion_text(completions[i]) for i in idx]
            start = len(why)
            judge_pairs = self._pair_judge(prompt_text(prompts[idx[0]]), texts, stats, why, ties)
            r = TOPOLOGIES[self.topology](len(idx), judge_pairs)
            failed = any(w is not None for w in why[start:])
            if self.topology == "single_elimination" and len(idx) > 1 and all(ties[-(len(idx) - 1):]) and not self._warned:
                self._warned = True  # every bracket match tied: the ranking is the bracket order, not quality
                log.warning("arenarl: every match of a group tied (the judge cannot tell the completions apart, or its "
                            "replies do not parse: see reward/arenarl/parse_fail_frac); single elimination still ranks "
                            "them strictly by bracket position, so the rewards are noise. Logged once; tie_frac counts it")
            z = [math.nan] * len(idx) if failed and self.on_fail == "none" else zscore(r)
            for i, v in zip(idx, z):
                scores[i] = v
        metrics = judge_metrics(stats, why, len(completions)) if why else {}
        if ties:
            metrics["tie_frac"] = ties  # matches whose two summed scores are equal (first-listed wins them)
        return RewardOutput(scores, metrics)
