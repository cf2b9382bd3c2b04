"""`writing_zero`: the pairwise writing GenRM of Writing-Zero (arXiv 2506.00103), scored against BRPO's
bootstrapped reference row.

Reconstructed, not checked against released code: the authors released none (searched 2026-11-24); the
rule follows the paper's description and the spec:

    ref_g   = the reference row of group g: `covey.algos.advantages.brpo.reference_rows` (the one home of
              the draw; the `brpo` advantage calls it too, with its `seed` = this reward's `reference_seed`)
    order 1: judge(prompt, a = y_i,   b = y_ref) -> (s_i, s_ref)        (scores out of 10 shared by the pair)
    order 2: judge(prompt, a = y_ref, b = y_i)   -> (s_ref', s_i')
    m_i     = ((s_i - s_ref) + (s_i' - s_ref')) / 2           score: margin (default)
    v_i     = sign(m_i) in {-1, 0, +1}                         score: sign
    the reference row scores 0 (it is not trained: `brpo` masks it)

With ``algo: {advantage: {name: brpo, compare: sign}}`` and this reward alone (``task_reward_weight: 0``)
the advantage is A_i = sign(m_i - 0) = v_i: the paper's verdict as a verifiable-style reward. The judge
is the `judge` machinery (backend, template with {prompt} {a} {b}, parser json_pair, cache, parse
retries); the built-in template `pairwise_total_10` is covey's wording of the paper's setup (writing
principles, a critique, two scores summing to 10), since the paper's prompt is not published.
A failed order (no parse after the retries, a backend error): ``on_fail: tie`` (default) counts that
order as (5, 5), i.e. no preference; ``none`` fails the row (NaN, counted by the runner).
Metrics: ``win_frac`` / ``tie_frac`` (verdicts over non-reference rows), ``position_flip_frac`` (pairs
whose two orders disagree in sign: the judge's position bias), and the judge metrics.
"""

from __future__ import annotations

import math
from typing import Any

from covey.algos.advantages.brpo import reference_rows
from covey.rewards._scoring import RewardOutput
from covey.rewards.group import iter_units
from covey.rewards.judge.core import JudgeHolder, pairwise_judge
from covey.rewards.judge.reward import judge_metrics, prompt_text
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["WritingZeroReward", "pair_margin"]


def pair_margin(order1: tuple[float, float], order2: tuple[float, float]) -> float:
    """m = ((s_i - s_ref) + (s_i' - s_ref')) / 2 from order 1 = (s_i, s_ref) and order 2 = (s_ref', s_i').

    >>> pair_margin((6, 4), (4, 6)), pair_margin((3, 7), (6, 4)), pair_margin((5, 5), (5, 5))
    (2.0, -3.0, 0.0)
    """
    return ((order1[0] - order1[1]) + (order2[1] - order2[0])) / 2.0


@register_reward("writing_zero")
class WritingZeroReward(JudgeHolder):
    """Writing-Zero pairwise GenRM: every row judged in both orders against its group's BRPO reference
    row (module docstring). Group-wise; needs the ``completion_ids`` column (covey's trainer passes it).

    reference_seed: must equal the `brpo` advantage's ``seed`` (default 0 both) so both pick one row.
    score:          margin (m_i, default) | sign (v_i)
    backend, template (default pairwise_total_10; any template with {prompt}, {a}, {b}), parser (json_pair),
    decoding, parse_retries, cache_size / cache_file: as for the `judge` reward.
    on_fail:        tie (a failed order counts as (tie_score, tie_score)) | none (the row fails: NaN)
    """

    group_aware = True

    def __init__(self, backend: Any, reference_seed: int = 0, score: str = "margin",
                 template: str = "pairwise_total_10", parser: Any = "json_pair", max_new_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, stop: list[str] | None = None, seed: int = 0,
                 parse_retries: int = 1, retry_temperature: float = 0.7, on_fail: str = "tie", tie_score: float = 5.0,
                 cache_size: int = 8192, cache_file: str | None = None, template_system: str | None = None):
        if score not in ("margin", "sign"):
            raise ValueError(f"writing_zero: score must be margin or sign, got {score!r}")
        if on_fail not in ("tie", "none"):
            raise ValueError(f"writing_zero: on_fail must be tie or none, got {on_fail!r}")
        self.judge = pairwise_judge("writing_zero", backend, template, parser, max_new_tokens=max_new_tokens,
                                    temperature=temperature, top_p=top_p, stop=tuple(stop or ()), seed=seed,
                                    parse_retries=parse_retries, retry_temperature=retry_temperature,
                                    cache_size=cache_size, cache_file=cache_file, template_system=template_system)
        self.reference_seed, self.score, self.on_fail, self.tie_score = int(reference_seed), score, on_fail, float(tie_score)
        self.__name__ = "writing_zero"

    def check_advantage(self, name: str, params: dict) -> None:
        """Config check (`covey.train.setup.check_run`): the advantage must be brpo drawing the same reference."""
        if name != "brpo":
            raise ValueError(f"writing_zero scores every row against brpo's reference row and gives that row 0; with the "
                             f"{name!r} advantage the reference would be trained on a fake 0: set algo.advantage: "
                             "{name: brpo, compare: sign}")
        if int(params.get("seed", 0)) != self.reference_seed:
            raise ValueError(f"writing_zero.reference_seed={self.reference_seed} but brpo's seed={params.get('seed', 0)}: "
                             "they must be equal, or the reward and the advantage pick different reference rows")

    def __call__(self, prompts, completions, group=None, completion_ids=None, **_) -> RewardOutput:
        if group is None or completion_ids is None:
            raise ValueError("writing_zero needs the 'group' and 'completion_ids' columns (the BRPO reference draw reads "
                             "them); covey's trainer passes both, a direct RewardRunner call must too")
        n = len(completions)
        is_ref = reference_rows(group, completion_ids, self.reference_seed)
        texts = [completion_text(c) for c in completions]
        pairs: list[tuple[int, int]] = []  # (row, its reference row)
        for idx in iter_units(group).values():
            ref = next(i for i in idx if is_ref[i])
            pairs.extend((i, ref) for i in idx if i != ref)
        orders, why, stats = self.judge.ask_both_orders([(prompt_text(prompts[i]), texts[i], texts[ref]) for i, ref in pairs])
        scores: list[float] = [0.0] * n
        tie = (self.tie_score, self.tie_score)
        verdicts, flips = [], []
        for (i, _), (o1, o2) in zip(pairs, orders):
            if (o1 is None or o2 is None) and self.on_fail == "none":
                scores[i] = math.nan
                continue
            o1, o2 = o1 or tie, o2 or tie
            margin = pair_margin(o1, o2)
            verdict = float((margin > 0) - (margin < 0))
            scores[i] = verdict if self.score == "sign" else margin
            verdicts.append(verdict)
            d1, d2 = o1[0] - o1[1], o2[1] - o2[0]
            flips.append(float(d1 * d2 < 0))
        metrics = judge_metrics(stats, why, n) if pairs else {}
        if verdicts:
            metrics["win_frac"] = [float(v > 0) for v in verdicts]
            metrics["tie_frac"] = [float(v == 0) for v in verdicts]
            metrics["position_flip_frac"] = flips
        return RewardOutput(scores, metrics)
