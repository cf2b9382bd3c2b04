"""Prompts that cannot fit the model's context, found when the run starts (not when first sampled)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from covey.models import apply_chat

__all__ = ["check_prompt_lengths", "prompt_token_limit"]

log = logging.getLogger(__name__)


def prompt_token_limit(model, task, max_new_tokens: int) -> tuple[int | None, str]:
    """(the longest prompt a run can take, why): the model's context (``max_position_embeddings``)
    minus `max_new_tokens`, capped by the task's own `max_prompt_tokens` (e.g. the `dataset` task's);
    None when neither is known."""
    from covey.models.vision import is_vision_model, text_config

    config = text_config(model) if is_vision_model(model) else getattr(model, "config", None)  # a VLM: its language tower's
    context = getattr(config, "max_position_embeddings", None)
    limits = []
    if context:
        limits.append((context - max_new_tokens, "the model's context minus sampling.max_new_tokens"))
    from covey.tasks.base import hooks_of

    cap = hooks_of(task).max_prompt_tokens
    if cap:
        limits.append((cap, "the task's max_prompt_tokens"))
    return min(limits) if limits else (None, "")


def check_prompt_lengths(items: Sequence[dict], tokenizer, max_prompt_tokens: int, on_long: str = "error", *,
                         why: str = "the model's context minus sampling.max_new_tokens") -> list[dict]:  # fmt: skip
    """The items whose chat-templated prompt has at most `max_prompt_tokens` tokens (`why` says
    where the limit comes from, for the error message).

    on_long="error": the first long prompt raises, naming the item id and its length;
    on_long="skip": long prompts are dropped with one warning that counts them (all dropped: error).
    """
    if on_long not in ("error", "skip"):
        raise ValueError(f"on_long must be 'error' or 'skip', got {on_long!r}")
    kept, long = [], []
    for item in items:
        n = len(apply_chat(tokenizer, item["prompt"]))
        if n <= max_prompt_tokens:
            kept.append(item)
        elif on_long == "error":
            raise ValueError(
                f"prompt of item {item['id']} has {n} tokens but at most {max_prompt_tokens} fit ({why}); "
                "shorten it, lower max_new_tokens, or set task.on_long_prompt=skip"
            )
        else:
            long.append(item["id"])
    if long:
        log.warning("skipped %d of %d prompts longer than %d tokens (ids %s%s)", len(long), len(items),
                    max_prompt_tokens, long[:5], "..." if len(long) > 5 else "")  # fmt: skip
    if not kept:
        raise ValueError(f"every prompt is longer than {max_prompt_tokens} tokens: nothing left to train on")
    return kept
