"""Format rewards: does the completion have the required shape (regex or ordered tags)?

Covers the DeepSeek-R1 style ``<think>…</think><answer>…</answer>`` check ("DeepSeek-R1:
Incentivizing Reasoning Capability in LLMs via Reinforcement Learning", arXiv 2501.12948, §2.2.2
"format rewards") and any user regex. Answer correctness lives in `math.py` / `code.py`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["FormatReward"]


@register_reward("format")
class FormatReward:
    r"""1.0 when a completion has the required format, else 0.0.

    Give either `pattern` (a regex that must match the WHOLE completion, ``.`` matching newlines) or
    `tags` (each ``<tag>…</tag>`` must appear exactly once, in the given order; with ``strict=True``
    (default) only whitespace may surround and separate the blocks). Default: tags think, answer.
    Leading/trailing whitespace of the completion is ignored. An empty completion scores 0.0.
    A callable class, not a closure, so it pickles into reward workers.

    >>> FormatReward()(prompts=None, completions=["<think>2+2</think>\n<answer>4</answer>", "<answer>4</answer>"])
    [1.0, 0.0]
    >>> FormatReward(pattern=r"Answer: \d+")(prompts=None, completions=["Answer: 12", "Answer: x"])
    [1.0, 0.0]
    >>> FormatReward(tags=["answer"], strict=False)(prompts=None, completions=["so <answer>4</answer> done"])
    [1.0]
    """

    def __init__(self, pattern: str | None = None, tags: Sequence[str] | None = None, strict: bool = True):
        if pattern is not None and tags is not None:
            raise ValueError("FormatReward: give `pattern` or `tags`, not both")
        if pattern is None:
            tags = list(tags) if tags is not None else ["think", "answer"]
            if not tags or not all(isinstance(t, str) and re.fullmatch(r"[\w\-]+", t) for t in tags):
                raise ValueError(f"FormatReward: tags must be non-empty names like 'answer', got {tags!r}")
            blocks = [rf"<{re.escape(t)}>(?:(?!<{re.escape(t)}>|</{re.escape(t)}>).)*</{re.escape(t)}>" for t in tags]
            gap = r"\s*" if strict else r".*?"
            pattern = gap + gap.join(blocks) + gap
            self._tags = tags
        else:
            self._tags = []
        try:
            self._re = re.compile(pattern, re.DOTALL)
        except re.error as e:
            raise ValueError(f"FormatReward: invalid regex {pattern!r}: {e}") from None
        self.pattern = pattern

    def __call__(self, prompts, completions, **_) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c).strip()
            ok = bool(text) and self._re.fullmatch(text) is not None
            # each tag exactly once: the regex alone would accept a second block in a free-text gap
            ok = ok and all(text.count(f"<{t}>") == 1 and text.count(f"</{t}>") == 1 for t in self._tags)
            out.append(1.0 if ok else 0.0)
        return out
