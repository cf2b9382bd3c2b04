"""Shared by the hint strategies (`hill`, `seele_provisional`): a hint appended to a prompt, the answer-leak
gate, and the rows of several rounds joined into one batch with their reward columns aligned.

A hint is part of the PROMPT the reasoner sees (the question, a blank line, the hint), so its tokens are
never in the policy loss: the learner trains only completion tokens.
"""

from __future__ import annotations

import torch

from covey.rollouts import Rollouts

__all__ = ["add_column", "leaks_answer", "prompt_text", "with_hint"]


def prompt_text(prompt) -> str:
    """The question's text: a plain prompt, or the content of the last user message of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    if not users:
        raise ValueError("a hint strategy needs a prompt with a user message")
    return str(users[-1]["content"])


def with_hint(prompt, hint: str):
    """`prompt` with `hint` after the question ("question\\n\\nhint"); a chat prompt gets it appended to
    its last user message, other messages unchanged. An empty hint leaves the prompt as it is."""
    hint = hint.strip()
    if not hint:
        return prompt
    if isinstance(prompt, str):
        return f"{prompt.strip()}\n\n{hint}"
    out = [dict(m) for m in prompt]
    last = max(i for i, m in enumerate(out) if m.get("role") == "user")
    out[last]["content"] = f"{str(out[last]['content']).strip()}\n\n{hint}"
    return out


_SHORT_LEAKS = ("= {a}", "equals {a}", "is {a}", "answer is {a}", "answer: {a}", "result is {a}", "value is {a}",
                "equal to {a}")  # fmt: skip


def leaks_answer(hint: str, answer) -> bool:
    """True when the hint gives the final answer away (HiLL's string gate): a boxed answer anywhere; for
    answers of one or two characters only phrases that state it ("= 7", "answer is 7", ...; a bare "7"
    is too common to count); longer answers by substring, case-sensitive or not. No answer: False."""
    gold = str(answer).strip() if answer is not None else ""
    if not gold:
        return False
    text = hint.strip()
    if f"\\boxed{{{gold}}}" in text:
        return True
    if len(gold) <= 2:
        low = text.lower()
        return any(p.format(a=gold).lower() in low for p in _SHORT_LEAKS)
    return gold in text or gold.lower() in text.lower()


def add_column(batch: Rollouts, name: str, values: torch.Tensor | None = None, *, only: bool = False) -> Rollouts:
    """`batch` with one more reward column `name` of weight 1 (`values` [N], default 0). `only`: every
    other column is zeroed, so the row's scalar reward is this column (rows whose reward a strategy
    computes itself, next to rows the run's rewards scored)."""
    n = len(batch)
    col = torch.zeros(n) if values is None else values.to(torch.float32)
    old = batch.rewards if batch.rewards is not None else torch.zeros(n, 0)
    names = tuple(batch.reward_names) if batch.rewards is not None else ()
    weights = batch.reward_weights if batch.reward_weights is not None else torch.ones(len(names))
    batch.rewards = torch.cat([torch.zeros_like(old) if only else old, col[:, None]], 1).float()
    batch.reward_names = (*names, name)
    batch.reward_weights = torch.cat([weights.float(), torch.ones(1)])
    return batch
