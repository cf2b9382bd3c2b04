"""`scope_ttrl`: subgroup-specific, confidence-weighted pseudo-labels for label-free RL (TTRL's setting).

Paper: "SCOPE: Subgroup-specific step-wise Confidence-weighted Pseudo-label Estimation" (arXiv 2512.15146),
on top of TTRL ("Test-Time Reinforcement Learning", arXiv 2504.16084). Checked against the released code:
szu-tera/SCOPE @ 0c45ca79728d4197c7ef33ffe83db6e650a0d4eb (`verl/trainer/ppo/myutils.py::split_steps,
compute_confidence, calculate_avg_step_conf`; `verl/trainer/ppo/grouputils.py::compute_conf_gt,
_batch_conf_vote, _majority_vote_with_confidence, compute_ttrl_metrics`; `verl/trainer/ppo/ray_trainer.py`
L1199-1317, the Pareto search; `verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py` L329-346;
`examples/SCOPE/Qwen2.5-Math/math.sh`: n 64, 32 votes per subgroup, lam 0.7, temperature 1.0).

    per row:      token confidence c_t = -mean(top-k log-probs at t), rounded to 3 decimals; the
                  released rollout asks vLLM for `logprobs=0`, the sampled token alone, so c_t = -log p(y_t)
                  (`top_k: 0`, the default); `top_k: k` is DeepConf's k best tokens (ScoringEngine)
                  steps: the completion split after every token whose text holds "\n\n"
                  C = mean over steps of (mean c_t over the step)
    per candidate subgroup size s (the powers of two dividing G, and G):
                  the G rows of a prompt form G/s contiguous subgroups; each subgroup draws `votes` rows
                  at random, without replacement, from ALL G rows and takes
                  label = argmax_a sum_{drawn j with answer a} C_j   ("None" when no drawn row has an answer)
                  every row of the subgroup is scored against its subgroup's label
                  reward_rate = mean scalar reward; diversity = mean over prompts of the distinct labels
    choice:       the Pareto front of (reward_rate, diversity) over the candidates; both normalised to
                  [0, 1] over the front ((x - min) / (max - min + 1e-8)); the size minimising
                  sqrt(lam (1 - r)^2 + (1 - lam)(1 - d)^2) (first on ties), then labels DRAWN AGAIN
                  at that size (the code calls compute_conf_gt once more) and the batch scored on them

Rows keep their item, with the label in `answer_column` and the true value (if any) in
``gold_<answer_column>``: the task's verifier scores against the label, and the metrics compare with
the truth (label_accuracy, reward_accuracy: what TTRL logs). A policy that always gives one answer
gets full pseudo-reward whatever the truth; only these metrics show it (the label-free setting's
known weakness, tested).

Departures: answers are extracted with `covey.rewards.math.extract_answer` (`order`) and compared on
`normalize_answer` keys (the code uses TTRL's boxed extractor and `simplify_expression_string`); the
released vote drops answer-less rows before zipping answers with confidences, which pairs later answers
with earlier rows' confidences; here each answer keeps its own row's confidence. Randomness comes from a
generator seeded by the step (`random.Random(sampling(0).seed)`), not Python's global one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import torch

from covey.engine.base import Engine, ScoringEngine
from covey.rewards.math import EXTRACTION_MODES, extract_answer, math_equal, normalize_answer
from covey.rollouts import Rollouts
from covey.samplers.groups import completion_texts, sample_groups
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["ScopeTTRL", "confidence_vote", "pareto_choice", "response_confidence", "split_steps", "subgroup_labels"]

NONE = "None"


def split_steps(tokens: Sequence[str], split: str = "\n\n") -> list[tuple[int, int]]:
    """[start, end) token spans: a step ends after every token whose text contains `split` (SCOPE's
    `split_steps`); a final span holds the rest. No tokens -> no steps."""
    spans, start = [], 0
    for i, tok in enumerate(tokens):
        if isinstance(tok, str) and split in tok:
            spans.append((start, i + 1))
            start = i + 1
    if start < len(tokens):
        spans.append((start, len(tokens)))
    return spans


def response_confidence(token_logprobs: torch.Tensor, spans: list[tuple[int, int]]) -> float:
    """C = mean over steps of the mean token confidence, c_t = round(-mean(log-probs at t), 3).

    token_logprobs: [L] (the sampled token's log-prob) or [L, k] (the k best log-probs). No steps: 0.0."""
    lp = token_logprobs.double()
    conf = -(lp if lp.dim() == 1 else lp.mean(-1))
    conf = torch.round(conf * 1000) / 1000
    steps = [float(conf[a:b].mean()) for a, b in spans if b > a]
    return sum(steps) / len(steps) if steps else 0.0


def confidence_vote(answers: Sequence[str | None], confidences: Sequence[float]) -> str:
    """The answer with the largest summed confidence (keys in order of first appearance: the first wins
    a tie, as Python's max over a dict); answer-less rows do not vote; no answer at all -> "None"."""
    score: dict[str, float] = {}
    shown: dict[str, str] = {}
    for a, c in zip(answers, confidences):
        if a is None:
            continue
        key = normalize_answer(a)
        score[key] = score.get(key, 0.0) + float(c)
        shown.setdefault(key, a)
    return shown[max(score, key=score.get)] if score else NONE


def subgroup_labels(answers: Sequence[str | None], confidences: Sequence[float], size: int, votes: int,
                    rng: random.Random) -> list[str]:  # fmt: skip
    """One prompt's G rows: the label of each row under subgroups of `size` contiguous rows, each voted
    by `votes` rows drawn without replacement from all G rows (`_batch_conf_vote`)."""
    g = len(answers)
    if g % size or not 1 <= votes <= g:
        raise ValueError(f"scope_ttrl: {g} rows cannot form subgroups of {size} voted by {votes} rows")
    out: list[str] = []
    for _ in range(g // size):
        drawn = rng.sample(range(g), votes)
        out += [confidence_vote([answers[j] for j in drawn], [confidences[j] for j in drawn])] * size
    return out


def pareto_choice(candidates: Sequence[tuple[int, float, float]], lam: float) -> int:
    """The size of the chosen candidate (size, reward_rate, diversity): non-dominated ones only, both
    metrics normalised over that front, smallest weighted distance to the ideal (1, 1)."""
    front = [c for c in candidates
             if not any(o[0] != c[0] and o[1] >= c[1] and o[2] >= c[2] and (o[1] > c[1] or o[2] > c[2]) for o in candidates)]  # fmt: skip
    r_lo, r_hi = min(c[1] for c in front), max(c[1] for c in front)
    d_lo, d_hi = min(c[2] for c in front), max(c[2] for c in front)
    best, best_dist = front[0][0], math.inf
    for size, r, d in front:
        nr, nd = (r - r_lo) / (r_hi - r_lo + 1e-8), (d - d_lo) / (d_hi - d_lo + 1e-8)
        dist = math.sqrt(lam * (1 - nr) ** 2 + (1 - lam) * (1 - nd) ** 2)
        if dist < best_dist:
            best, best_dist = size, dist
    return best


def _protocols(params: dict) -> tuple[type, ...]:
    return (ScoringEngine,) if params.get("top_k", 0) else (Engine,)


@register_strategy("scope_ttrl", paper="SCOPE: Subgroup-specific step-wise Confidence-weighted Pseudo-label Estimation",
                   arxiv="2512.15146")  # fmt: skip
class ScopeTTRL:
    """SCOPE's pseudo-labels for a label-free run (module docstring).

    votes:         rows drawn per subgroup vote (0: half the group, the released 32 of 64).
    lam:           weight of the reward rate against the label diversity in the Pareto choice (0.7).
    sizes:         candidate subgroup sizes (empty: the powers of two dividing G, and G).
    top_k:         0: the sampled token's log-prob (the released setting); k: the k best (needs ScoringEngine).
    order:         answer extraction modes (`covey.rewards.math.EXTRACTION_MODES`).
    answer_column: the item column the verifier reads; the label goes there.
    """

    caps = StrategyCaps(engine_protocols=_protocols)

    def __init__(self, *, votes: int = 0, lam: float = 0.7, sizes: list[int] | None = None, top_k: int = 0,
                 order: list[str] | None = None, answer_column: str = "answer", split: str = "\n\n"):  # fmt: skip
        if votes < 0 or top_k < 0 or not 0.0 <= lam <= 1.0:
            raise ValueError(f"scope_ttrl: votes and top_k must be >= 0 and lam in [0, 1] (got {votes}, {top_k}, {lam})")
        if sizes is not None and any(s < 1 for s in sizes):
            raise ValueError(f"scope_ttrl: sizes must be >= 1, got {sizes}")
        bad = [m for m in order or () if m not in EXTRACTION_MODES]
        if bad:
            raise ValueError(f"scope_ttrl: order holds unknown modes {bad}; modes are {list(EXTRACTION_MODES)}")
        self.votes, self.lam, self.sizes, self.top_k = votes, lam, list(sizes or []), top_k
        self.order, self.answer_column, self.split = list(order or EXTRACTION_MODES), answer_column, split

    def _confidences(self, batch: Rollouts, ctx: RolloutContext) -> list[float]:
        lengths = batch.lengths.tolist()
        ids = [batch.completion_ids[i, :k].tolist() for i, k in enumerate(lengths)]
        if self.top_k:
            sp = ctx.sampling(0)
            scored = ctx.engine.score([p.tolist() for p in batch.prompt_ids], ids, temperature=sp.temperature, top_k=self.top_k)
            per_token = [top for _, top in scored]
        else:
            per_token = [batch.behaviour_logprobs[i, :k] for i, k in enumerate(lengths)]
        split = self.split
        return [response_confidence(lp, split_steps(ctx.tokenizer.convert_ids_to_tokens(row), split))
                for lp, row in zip(per_token, ids)]  # fmt: skip

    def _relabel(self, batch: Rollouts, labels: list[str]) -> Rollouts:
        out = batch.select(torch.arange(len(batch)))
        key, gold = self.answer_column, f"gold_{self.answer_column}"
        out.items = [{**it, key: lab, gold: it.get(gold, it.get(key))} for it, lab in zip(batch.items, labels)]
        out.rewards = None
        return out

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        batch = sample_groups(ctx.engine, ctx.tokenizer, ctx.draws, ctx.sampling(0))
        texts = completion_texts(ctx.tokenizer, batch)
        answers = [extract_answer(t, order=self.order) for t in texts]
        conf = self._confidences(batch, ctx)
        rows = [torch.nonzero(batch.group == g).flatten().tolist() for g in torch.unique(batch.group).tolist()]
        rng = random.Random(ctx.sampling(0).seed)

        def labels_at(size_of) -> list[str]:
            labels = [NONE] * len(batch)
            for idx in rows:
                size = size_of(len(idx))
                votes = self.votes or max(1, len(idx) // 2)
                got = subgroup_labels([answers[i] for i in idx], [conf[i] for i in idx], size, min(votes, len(idx)), rng)
                for i, lab in zip(idx, got):
                    labels[i] = lab
            return labels

        def candidates(g: int) -> list[int]:
            pool = self.sizes or [2**k for k in range(g.bit_length()) if g % 2**k == 0] + [g]
            return sorted({s for s in pool if g % s == 0})

        sizes = sorted({s for idx in rows for s in candidates(len(idx))})
        scored = []
        for s in sizes:  # a prompt whose G the size does not divide votes as one subgroup (size G)
            cand = self._relabel(batch, labels_at(lambda g, s=s: s if g % s == 0 else g))
            ctx.score(cand)
            r = cand.scalar_rewards()
            diversity = sum(len({cand.items[i][self.answer_column] for i in idx}) for idx in rows) / len(rows)
            scored.append((s, float(r.mean()), diversity))
        chosen = pareto_choice(scored, self.lam)
        out = self._relabel(batch, labels_at(lambda g: chosen if g % chosen == 0 else g))
        metrics = dict(ctx.score(out))
        metrics.update(self._audit(out, ctx, chosen, scored))
        return out, metrics

    def _audit(self, out: Rollouts, ctx: RolloutContext, chosen: int, scored) -> dict[str, float]:
        """TTRL's label / reward accuracy against the truth (when the items hold one)."""
        gold_key = f"gold_{self.answer_column}"
        golds = [it.get(gold_key) for it in out.items]
        metrics = {"scope/subgroup_size": float(chosen),
                   "scope/reward_rate": dict((s, r) for s, r, _ in scored)[chosen],
                   "scope/diversity": dict((s, d) for s, _, d in scored)[chosen]}  # fmt: skip
        if any(g is None or not str(g).strip() for g in golds):
            return metrics
        truth = self._relabel(out, [str(g) for g in golds])
        ctx.score(truth)
        pseudo, real = out.scalar_rewards(), truth.scalar_rewards()
        labels = [it[self.answer_column] for it in out.items]
        metrics["scope/label_accuracy"] = sum(float(lab != NONE and math_equal(lab, g)) for lab, g in zip(labels, golds)) / len(golds)
        metrics["scope/reward_accuracy"] = float((pseudo == real).double().mean())
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

