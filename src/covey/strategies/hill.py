"""`hill`: a hinter writes hints for the prompts the reasoner never solves; hinter and reasoner train together.

Paper: "Learning to Hint for Reinforcement Learning" (HiLL, arXiv 2604.00698). Checked against the released
code: Andree-9/HiLL @ 195d94ebee446504db6477606914d5c87fc13c30 (`verl/trainer/ppo/hill_ray_trainer.py`:
`_training_step_reasoner_first`, `_prepare_hinter_batch`, the hinter update in `fit`;
`verl/trainer/ppo/hinter_utils.py`: `compute_hint_reward`, `select_best_hint`,
`check_answer_leaking_string_match`, `build_batch_with_best_hints`; `scripts/run_hill.sh`).

    1. G rollouts per prompt, scored. Hard prompts: every row's reward <= 0.5 (all incorrect).
    2. For each hard prompt the hinter sees the question, ONE of its failed rollouts (drawn at random) and
       the reference solution, and writes M hints (`<hint>...</hint>`). Gates: no parseable hint, a hint
       that leaks the answer (`leaks_answer`), or a hinted prompt over the length limit -> failed.
    3. Each passing hint is appended to the question ("question\\n\\nhint") and the reasoner rolls out G
       completions of the hinted prompt, scored against the original item.
    4. Hint reliance of a rollout y: d = mean_t log pi(y_t | Q, y_<t) - mean_t log pi(y_t | Q + hint, y_<t)
       (the reasoner's current weights; the second term is the behaviour log-prob). Per hint,
       d_bar = mean of d over its CORRECT rollouts.
    5. Hint reward, with p = the fraction of its G rollouts that are correct (> 0.5):
           failed gate -> -0.2;   p in {0, 1} -> 0
           variance  p (1 - p)            non_deg  1 - p^G - (1 - p)^G     (the probability term)
           transfer_weighted_*: the term x exp(min(d_bar, 0) / T)         (T = transfer_temperature)
    6. The best hint (largest reward, first on ties) replaces the hard prompt's group with its hinted
       rollouts when its probability term beats the original's (0 for an all-incorrect group).
    7. The hinter trains with GRPO on its M hints per hard prompt, rewards from 5 (failed gates included).

Here the hinter is the policy itself in another role (its rows join the batch: their prompt is the
hinter prompt, their reward the hint reward in a reward column `hint`, other columns zeroed), so one
model learns to hint and to reason; the released code trains a second model (Qwen3-4B-Instruct) as
hinter, which covey does not build (docs/rollouts.md). `train_hinter: false` keeps the hints and leaves
the hinter rows out. The hinter prompt is covey's own wording of the same inputs and instructions.
The reasoner's hinted rows keep the original item (their reward reads its answer); the hint is in their
prompt, so no hint token is in the loss.

Released settings (run_hill.sh): M = 4 hints, G = 8, reward `transfer_weighted_non_deg`, T = 0.3,
min one hard prompt, clip 0.2 / 0.28, no KL.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from typing import Any, Literal

import torch

from covey.engine.base import ScoringEngine
from covey.models import apply_chat
from covey.rollouts import Rollouts
from covey.samplers.base import Draw
from covey.samplers.groups import completion_texts, sample_groups
from covey.strategies._hints import add_column, leaks_answer, prompt_text, with_hint
from covey.strategies.base import RolloutContext, StrategyCaps, register_strategy

__all__ = ["HINT_TEMPLATE", "HiLL", "hint_reward", "parse_hint"]

GATE_PENALTY = -0.2
CORRECT = 0.5  # a row is correct when its scalar reward is above this

HINT_TEMPLATE = """A student tried to solve the problem below and got it wrong. Write a short hint that helps them find the \
right path without solving the problem for them.

Problem:
{question}

The student's attempt:
{attempt}

Reference solution (only for you; the student will not see it):
{solution}

Find the misconception or the missing idea in the attempt and point at it: a relevant fact, a property, another way \
to look at the problem, or a useful intermediate goal. Do not give the final answer, and do not carry out steps or \
computations for the student.

Answer in this form:
<analysis>what went wrong and what idea is needed</analysis>
<hint>one to three sentences</hint>"""


def parse_hint(text: str) -> str | None:
    """The stripped text between the first <hint> and </hint> (case-insensitive); None when there is none
    or it is empty."""
    m = re.search(r"<hint>\s*(.*?)\s*</hint>", text, re.IGNORECASE | re.DOTALL)
    return (m.group(1).strip() or None) if m else None


def hint_reward(correct: torch.Tensor, reliance: float | None, *, kind: str, temperature: float,
                gate_ok: bool = True) -> tuple[float, float]:  # fmt: skip
    """(reward, probability term) of one hint from its rollouts' correctness [G] bool (docstring step 5).
    `reliance`: d_bar over the correct rollouts (None: no correct rollout or not measured)."""
    if not gate_ok:
        return GATE_PENALTY, 0.0
    g = int(correct.numel())
    p = float(correct.double().mean()) if g else 0.0
    if p in (0.0, 1.0):
        return 0.0, 0.0
    prob = p * (1 - p) if kind.endswith("variance") else 1.0 - p**g - (1.0 - p) ** g
    if kind.startswith("transfer_weighted") and reliance is not None:
        return prob * math.exp(min(reliance, 0.0) / temperature), prob
    return prob, prob


@register_strategy("hill", paper="Learning to Hint for Reinforcement Learning", arxiv="2604.00698")
class HiLL:
    """HiLL's hinted rollouts with the policy as its own hinter (module docstring).

    num_hints:            hints per hard prompt (M).
    reward_type:          the hinter's reward (`variance`, `non_deg`, `transfer_weighted_variance`,
                          `transfer_weighted_non_deg`).
    transfer_temperature: T in exp(min(d_bar, 0) / T).
    hint_max_new_tokens:  the hinter's generation limit (0: the run's `sampling.max_new_tokens`).
    solution_column, answer_column: the item columns holding the reference solution and final answer.
    train_hinter:         the hinter's rows join the batch (False: hints only).
    min_hard_prompts:     hints are written only when at least this many prompts are hard.
    template:             the hinter prompt, with {question}, {attempt} and {solution}.
    """

    caps = StrategyCaps(engine_protocols=(ScoringEngine,))

    def __init__(self, *, num_hints: int = 4,
                 reward_type: Literal["variance", "non_deg", "transfer_weighted_variance", "transfer_weighted_non_deg"] = "transfer_weighted_non_deg",
                 transfer_temperature: float = 0.3, hint_max_new_tokens: int = 0, solution_column: str = "solution",
                 answer_column: str = "answer", train_hinter: bool = True, min_hard_prompts: int = 1,
                 template: str = HINT_TEMPLATE):  # fmt: skip
        if num_hints < 1 or min_hard_prompts < 1 or hint_max_new_tokens < 0 or transfer_temperature <= 0:
            raise ValueError("hill: num_hints and min_hard_prompts must be >= 1, hint_max_new_tokens >= 0 and "
                             f"transfer_temperature > 0 (got {num_hints}, {min_hard_prompts}, {hint_max_new_tokens}, "
                             f"{transfer_temperature})")  # fmt: skip
        missing = [k for k in ("{question}", "{attempt}", "{solution}") if k not in template]
        if missing:
            raise ValueError(f"hill: template must contain {', '.join(missing)}")
        self.m, self.kind, self.temp = num_hints, reward_type, transfer_temperature
        self.hint_tokens, self.solution, self.answer = hint_max_new_tokens, solution_column, answer_column
        self.train_hinter, self.min_hard, self.template = train_hinter, min_hard_prompts, template

    def rollout(self, items: list[dict], ctx: RolloutContext) -> tuple[Rollouts, dict[str, float]]:
        tok = ctx.tokenizer
        batch = sample_groups(ctx.engine, tok, ctx.draws, ctx.sampling(0))
        metrics = {f"reasoner/{k}": v for k, v in ctx.score(batch).items()}
        correct = batch.scalar_rewards() > CORRECT
        groups = torch.unique(batch.group).tolist()
        hard = [g for g in groups if not bool(correct[batch.group == g].any())]
        metrics.update({"hill/hard_frac": len(hard) / len(groups), "hill/replaced": 0.0})
        if len(hard) < self.min_hard:
            return add_column(batch, "hint"), metrics
        rng = random.Random(ctx.sampling(0).seed)
        texts = completion_texts(tok, batch)
        firsts = {g: int((batch.group == g).nonzero()[0]) for g in hard}
        hint_draws = []
        for g in hard:
            it = batch.items[firsts[g]]
            if self.solution not in it:
                raise ValueError(f"hill: item {it.get('id')!r} has no {self.solution!r} column (the reference solution "
                                 "the hinter reads); set solution_column")  # fmt: skip
            attempt = texts[rng.choice((batch.group == g).nonzero().flatten().tolist())]
            text = self.template.format(question=prompt_text(it["prompt"]), attempt=attempt, solution=it[self.solution])
            asked = text if isinstance(it["prompt"], str) else [{"role": "user", "content": text}]  # the item's prompt kind
            hint_draws.append(Draw(item={**it, "prompt": asked}, n=self.m))
        sp = ctx.sampling(1)
        if self.hint_tokens:
            sp = dataclasses.replace(sp, max_new_tokens=self.hint_tokens)
        hinter = sample_groups(ctx.engine, tok, hint_draws, sp)  # group k: hard prompt hard[k], M rows
        hints = [parse_hint(t) for t in completion_texts(tok, hinter)]
        gate, hinted_draws, owner = [], [], []  # owner: the hinter row of each hinted draw
        for r, h in enumerate(hints):
            g = hard[int(hinter.group[r])]
            it = batch.items[firsts[g]]
            ok = h is not None and not leaks_answer(h, it.get(self.answer))
            prompt = with_hint(it["prompt"], h or "")
            if ok and ctx.max_prompt_tokens is not None:
                ok = len(_ids(tok, prompt)) <= ctx.max_prompt_tokens
            gate.append(ok)
            if ok:
                n = int((batch.group == g).sum())
                hinted_draws.append(Draw(item={**it, "prompt": prompt}, n=n))
                owner.append(r)
        rewards = [GATE_PENALTY] * len(hints)
        probs = [0.0] * len(hints)
        hinted_parts: dict[int, Rollouts] = {}
        reliances: list[float] = []
        if hinted_draws:
            hinted = sample_groups(ctx.engine, tok, hinted_draws, ctx.sampling(2))
            originals = [batch.items[firsts[hard[int(hinter.group[r])]]] for r in owner]
            hinted.items = [originals[int(k)] for k in hinted.group.tolist()]  # rewards read the original item
            ctx.score(hinted)
            d = self._reliance(hinted, originals, ctx)
            ok_rows = hinted.scalar_rewards() > CORRECT
            for k, r in enumerate(owner):
                rows = hinted.group == k
                good = ok_rows[rows]
                rel = float(d[rows][good].mean()) if bool(good.any()) else None
                if rel is not None:
                    reliances.append(rel)
                rewards[r], probs[r] = hint_reward(good, rel, kind=self.kind, temperature=self.temp)
                hinted_parts[r] = hinted.select(rows.nonzero().flatten())
        keep, extra = torch.ones(len(batch), dtype=torch.bool), []
        for k, g in enumerate(hard):
            mine = [r for r in range(len(hints)) if int(hinter.group[r]) == k]
            best = max(mine, key=lambda r: rewards[r])  # first on ties
            if probs[best] > 0.0:  # beats the all-incorrect original's 0
                keep &= batch.group != g
                part = hinted_parts[best]
                part.group = torch.full_like(part.group, g)
                extra.append(part)
        metrics.update({
            "hill/replaced": float(len(extra)), "hill/hint_pass_frac": sum(gate) / len(gate),
            "hill/hint_reward_mean": sum(rewards) / len(rewards),
            "hill/hint_reliance_mean": sum(reliances) / len(reliances) if reliances else 0.0,
        })  # fmt: skip
        out = Rollouts.concat([batch.select(keep.nonzero().flatten()), *extra]) if extra else batch
        out = add_column(out, "hint")
        if self.train_hinter:
            hinter.rewards, hinter.reward_names, hinter.reward_weights = (torch.zeros(len(hinter), len(out.reward_names) - 1),
                                                                          out.reward_names[:-1], out.reward_weights[:-1])  # fmt: skip
            hinter = add_column(hinter, "hint", torch.tensor(rewards), only=True)
            hinter.group = hinter.group + int(out.group.max()) + 1
            out = Rollouts.concat([out, hinter])
        _, out.group = torch.unique(out.group, return_inverse=True)
        return out, metrics

    @staticmethod
    def _reliance(hinted: Rollouts, originals: list[dict], ctx: RolloutContext) -> torch.Tensor:
        """[N] d = mean log pi(y | Q) - mean log pi(y | Q + hint), both at the sampling temperature."""
        lengths = hinted.lengths
        comps = [hinted.completion_ids[i, :k].tolist() for i, k in enumerate(lengths.tolist())]
        plain = [_ids(ctx.tokenizer, originals[int(k)]["prompt"]) for k in hinted.group.tolist()]
        scored = ctx.engine.score(plain, comps, temperature=ctx.sampling(2).temperature)
        q = torch.stack([lp.double().mean() if lp.numel() else torch.zeros((), dtype=torch.float64) for lp, _ in scored])
        m = hinted.completion_mask.double()
        qh = (hinted.behaviour_logprobs.double() * m).sum(-1) / m.sum(-1).clamp(min=1)
        return q - qh

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def _ids(tokenizer, prompt) -> list[int]:
    return list(apply_chat(tokenizer, prompt))
