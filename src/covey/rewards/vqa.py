"""Multiple-choice VQA accuracy in the style of Patho-R1 ("Patho-R1: A Multimodal Reinforcement
Learning-Based Pathology Expert Reasoner", arXiv 2505.11404): the completion reasons in <think>…</think>
and names one option in <answer>…</answer>; the reward is 1.0 when that option is the gold one.

Reconstructed, hence `_provisional`: Patho-R1's repository (Wenchuan-Zhang/Patho-R1 34948168047e) releases
the models and the inference prompt ("Use the following format:<think> Your step-by-step reasoning
</think><answer> Your final answer </answer>", options written "A. …"), not the RL reward code (its
`r1/` folder holds an empty init.py). How the answer is read is covey's choice: the last <answer>
block; its option is a lone letter at its start ("D", "D.", "(D) …", "D: …") or, failing that, the one
option whose text the answer equals (case and surrounding punctuation ignored). Two letters, an
unknown letter or no answer block score 0.0, so listing every option does not pay. Pair it with the
`format` reward (tags think, answer), the format term of DeepSeek-R1-style recipes.
"""

from __future__ import annotations

import re

from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["chosen_option", "mcq_accuracy_provisional"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_LEAD = re.compile(r"^\(?([A-Z])\)?(?:[.:)\s]|$)")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip(".:;,!").strip().lower()


def chosen_option(text: str, options: dict[str, str]) -> str | None:
    """The option letter a completion answers, or None (module docstring).

    >>> opts = {"A": "circle", "B": "square", "C": "triangle"}
    >>> chosen_option("<think>four corners</think><answer>(B) square</answer>", opts), chosen_option("<answer> triangle. </answer>", opts)
    ('B', 'C')
    >>> chosen_option("<answer>A or B</answer>", opts), chosen_option("<answer>Z</answer>", opts), chosen_option("B", opts)
    (None, None, None)
    """
    blocks = _ANSWER.findall(text)
    if not blocks:
        return None
    answer = blocks[-1].strip()
    m = _LEAD.match(answer)
    if m:
        rest = answer[m.end():]
        letter = m.group(1)
        others = re.findall(r"\b([A-Z])\b", rest)
        if letter in options and not any(o in options and o != letter for o in others):
            return letter
        return None
    hits = [k for k, v in options.items() if _norm(v) == _norm(answer)]
    return hits[0] if len(hits) == 1 else None


@register_reward("mcq_accuracy_provisional", paper="Patho-R1 (reconstructed)", arxiv="2505.11404")
def mcq_accuracy_provisional(prompts, completions, answer, options, **_) -> list[float]:
    """1.0 when the completion's chosen option (`chosen_option`) is the gold letter in `answer`; `options`
    is each row's {letter: text}.

    >>> mcq_accuracy_provisional(None, ["<answer>B</answer>", "<answer>B. square</answer>", "<answer>A B</answer>"],
    ...                          ["B", "A", "B"], [{"A": "circle", "B": "square"}] * 3)
    [1.0, 0.0, 0.0]
    """
    n = len(completions)
    for name, col in (("answer", answer), ("options", options)):
        if len(col) != n:
            raise ValueError(f"column {name} has {len(col)} entries but there are {n} completions")
    out = []
    for c, gold, opts in zip(completions, answer, options):
        if not isinstance(opts, dict) or not opts:
            raise ValueError(f"column options must hold a {{letter: text}} mapping per row, got {opts!r}"[:200])
        out.append(1.0 if chosen_option(completion_text(c), opts) == str(gold).strip() else 0.0)
    return out
