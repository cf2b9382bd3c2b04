"""Reward functions for examples/own_data: TRL's signature, every dataset column as a keyword."""

import re


def ends_with_answer(completions, answer, **kwargs):
    """1.0 when the last number in the completion equals the row's `answer` column.

    Completions are strings for plain prompts and [{"role": "assistant", "content": ...}] for chat
    prompts, as in TRL.
    """
    scores = []
    for completion, gold in zip(completions, answer):
        text = completion if isinstance(completion, str) else completion[0]["content"]
        numbers = re.findall(r"-?\d+", text)
        scores.append(1.0 if numbers and numbers[-1] == str(gold) else 0.0)
    return scores


def brevity(completions, **kwargs):
    """A small bonus for answers under 200 characters."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [0.2 if len(t) < 200 else 0.0 for t in texts]
