"""Turning a prompt (text or chat messages) into the token ids an engine consumes.

The engine speaks token ids only; this is the one place that applies chat templates. Datasets and
the rollout layer call `apply_chat` per prompt; multi-turn episodes extend a conversation with
`TemplateDelta` (the tokens the template adds for environment messages after an assistant turn),
which refuses, with `TemplateError`, a template that rewrites earlier turns.
"""

from __future__ import annotations

__all__ = ["CHAT_ROLES", "TemplateDelta", "TemplateError", "apply_chat", "check_role", "content_text", "render"]

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
      `add_generation_prompt=True`, so the ids end where the assistant's answer starts. A content may
      be a list of parts ({"type": "text", "text"}, {"type": "image", "image"}); with a vision-language
      policy's tokenizer (`covey.models.vision.VisionTokenizer`) the processor renders them and the ids
      come back as a `VisionPrompt` carrying the image tensors (docs/vlm.md).

    Raises ValueError for any other type, for malformed messages or an unknown role, for image parts
    given to a text-only tokenizer, and for a tokenizer without a chat template when messages are given.
    """
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt))
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise ValueError(
            f"prompt must be a str or a non-empty list of {{'role', 'content'}} messages, got {type(prompt).__name__}"
        )
    images = 0
    for i, msg in enumerate(prompt):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise ValueError(f"prompt message {i} must be a dict with 'role' and 'content', got {msg!r}")
        check_role(msg["role"], f"prompt message {i}")
        images += _count_images(msg["content"], i)
    from covey.models.vision import VisionTokenizer

    if isinstance(tokenizer, VisionTokenizer):
        return tokenizer.encode_chat(list(prompt))
    if images:
        raise ValueError(f"the prompt holds {images} image(s) but the policy is a text-only model: use a vision-language "
                         "model (model.family: vision_language, docs/vlm.md)")  # fmt: skip
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template: pass the prompt as a plain string instead")
    prompt = [m if isinstance(m["content"], str) else {**m, "content": "".join(p["text"] for p in m["content"])} for m in prompt]
    out = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding here; older versions returned the list itself.
    if hasattr(out, "keys") and "input_ids" in out:
        out = out["input_ids"]
    return [int(t) for t in out]


def content_text(content) -> str:
    """A message content as plain text: a string as it is; a list of parts with its text parts joined and
    each image part shown as "<image>" (logs and sample tables; never the model's input).

    >>> content_text([{"type": "image", "image": None}, {"type": "text", "text": "What color?"}])
    '<image>What color?'
    """
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or "" if p.get("type") == "text" else f"<{p.get('type')}>" for p in content)


def _count_images(content, i: int) -> int:
    """The image parts of a message's content (a str has none); ValueError for a malformed part."""
    if isinstance(content, str):
        return 0
    if not isinstance(content, (list, tuple)):
        raise ValueError(f"prompt message {i}: content must be a str or a list of parts, got {type(content).__name__}")
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("text", "image") or (kind == "text" and not isinstance(part.get("text"), str)):
            raise ValueError(f"prompt message {i}: a content part must be {{'type': 'text', 'text': str}} or "
                             f"{{'type': 'image', 'image': ...}}, got {part!r}"[:300])  # fmt: skip
    return sum(part["type"] == "image" for part in content)


class TemplateError(ValueError):
    """The chat template cannot give token-exact episodes (it rewrites earlier turns)."""


def render(tokenizer, messages: list[dict], *, generation_prompt: bool, tools: list[dict] | None = None) -> list[int]:
    """Token ids of `messages` under the tokenizer's chat template."""
    kw = {"tools": tools} if tools else {}
    out = tokenizer.apply_chat_template(list(messages), add_generation_prompt=generation_prompt, tokenize=True, **kw)
    if hasattr(out, "keys") and "input_ids" in out:  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return [int(t) for t in out]


class TemplateDelta:
    """Env messages -> the token ids the chat template adds for them after an assistant turn.

    ``tokens(messages, closed)`` = [end-of-turn id if the turn was not closed by it] + the template's
    text after the end-of-turn token (e.g. "\\n") + the messages + the next generation prompt, all
    taken from renders of a fixed dummy conversation (never from the sampled text).
    """

    _DUMMY = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]

    def __init__(self, tokenizer, tools: list[dict] | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the episodes strategy needs a tokenizer with a chat template")
        self.tok, self.tools = tokenizer, tools
        self.eos = tokenizer.eos_token_id
        self.base = render(tokenizer, self._DUMMY, generation_prompt=False, tools=tools)
        start = render(tokenizer, self._DUMMY[:1], generation_prompt=True, tools=tools)
        if self.base[: len(start)] != start:
            raise TemplateError("the chat template renders the conversation before an assistant turn differently "
                                "once the turn is added: it does not append turns")  # fmt: skip
        ends = [i for i, t in enumerate(self.base) if t == self.eos and i >= len(start)]
        if not ends:
            raise TemplateError(f"the chat template does not close assistant turns with the eos token {self.eos}")
        self.glue = self.base[ends[-1] + 1 :]
        think = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\ny"}]
        before = render(tokenizer, think, generation_prompt=False, tools=tools)
        after = render(tokenizer, [*think, {"role": "user", "content": "z"}], generation_prompt=True, tools=tools)
        if after[: len(before)] != before:
            raise TemplateError("the chat template rewrites earlier turns (e.g. drops <think> from past assistant "
                                "messages), so one row per episode cannot hold the sampled tokens")  # fmt: skip

    def tokens(self, messages: list[dict], closed: bool) -> list[int]:
        full = render(self.tok, [*self._DUMMY, *messages], generation_prompt=True, tools=self.tools)
        if full[: len(self.base)] != self.base:
            raise TemplateError(f"the chat template rewrites earlier turns when {[m['role'] for m in messages]} "
                                "messages are added")  # fmt: skip
        return ([] if closed else [self.eos]) + self.glue + full[len(self.base) :]
