"""Turning a prompt (text or chat messages) into the token ids an engine consumes.

The engine speaks token ids only; this is the one place that applies chat templates. Datasets and
the rollout layer call `apply_chat` per prompt.
"""

from __future__ import annotations

__all__ = ["CHAT_ROLES", "apply_chat", "check_role"]

CHAT_ROLES = ("system", "user", "assistant", "tool")
"""The roles a chat prompt may use (chat templates render others wrongly or not at all)."""


def check_role(role, where: str) -> None:
    """ValueError naming `where` unless `role` is one of CHAT_ROLES."""
    if role not in CHAT_ROLES:
        raise ValueError(f"{where}: unknown chat role {role!r}; a message's role is one of {', '.join(CHAT_ROLES)}")


def apply_chat(tokenizer, prompt) -> list[int]:
    """Token ids for one prompt.

    - `prompt` a str: plain `tokenizer.encode(prompt)` with the tokenizer's default special tokens
      (SmolLM2 and the tiny models add none), no chat template: for base-model style completion.
    - `prompt` a list of {"role": ..., "content": ...} dicts: the tokenizer's chat template with
      `add_generation_prompt=True`, so the ids end where the assistant's answer starts.

    Raises ValueError for any other type, for malformed messages or an unknown role, and for a
    tokenizer without a chat template when messages are given.
    """
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt))
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise ValueError(
            f"prompt must be a str or a non-empty list of {{'role', 'content'}} messages, got {type(prompt).__name__}"
        )
    for i, msg in enumerate(prompt):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise ValueError(f"prompt message {i} must be a dict with 'role' and 'content', got {msg!r}")
        check_role(msg["role"], f"prompt message {i}")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template: pass the prompt as a plain string instead")
    out = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding here; older versions returned the list itself.
    if hasattr(out, "keys") and "input_ids" in out:
        out = out["input_ids"]
    return [int(t) for t in out]
