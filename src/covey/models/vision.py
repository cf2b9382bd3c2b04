"""Vision-language models (the `vision_language` family, docs/vlm.md): the one home of what covey needs
to know about them, shared by the engine, the learner and the data.

A VLM is an HF `AutoModelForImageTextToText` model (Qwen2-VL, Qwen2.5-VL, Idefics3, SmolVLM, Gemma 3) with
its `AutoProcessor`. A prompt becomes token ids with the image placeholders already expanded (the
processor's rule) plus the processor's image tensors (`VisionInputs`: pixel_values, image_grid_thw,
pixel_attention_mask, ...); the ids travel as a `VisionPrompt` (a list of ints carrying its
`VisionInputs`), so every stage that handles prompt ids handles these unchanged, and the engine and the
learner read the images from it. The G rows of a group share one `VisionInputs` object.

The forward is the same function for the engine's prefill and the learner (`forward_inputs`): the
model's base (`vision_base`: the part that merges image features into the token embeddings) gets the
ids, the collated image tensors, explicit positions (Qwen2-VL's M-RoPE positions from the model's own
`get_rope_index`; 1-D positions otherwise) and the token-type ids the model reads (Qwen2-VL's
`mm_token_type_ids`, Gemma 3's `token_type_ids`: 1 on image tokens), rebuilt from the ids so that
left-padded prefill and right-padded training see the same thing. Logits are always `lm_head(hidden)`,
as `covey.learner.logprobs` computes them.

`VisionTokenizer` is the policy's tokenizer with its processor: every tokenizer attribute is the
tokenizer's (decoding, pad and EOS ids), `encode_chat` renders chat messages with images through the
processor, `save_pretrained` saves the processor. `covey.models.chat.apply_chat` routes chat prompts to it.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "VISION_TYPES",
    "as_vision_tokenizer",
    "VisionInputs",
    "VisionPrompt",
    "VisionTokenizer",
    "collate",
    "content_parts",
    "forward_inputs",
    "image_token_ids",
    "is_vision_config",
    "is_vision_model",
    "load_image",
    "prompt_images",
    "text_config",
    "vision_base",
    "vision_hidden",
    "vision_module_names",
    "vision_parameters",
    "vision_stop_ids",
]

log = logging.getLogger(__name__)

VISION_TYPES = ("qwen2_vl", "qwen2_5_vl", "idefics3", "smolvlm", "gemma3")
"""config.json model_type of the VLM families covey supports (docs/vlm.md)."""
_TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")  # rebuilt from the ids


def is_vision_config(config: dict | None) -> bool:
    """Whether a config.json dict describes a vision-language model (a `vision_config` section, or a
    model_type of `VISION_TYPES`)."""
    return bool(config) and ("vision_config" in config or config.get("model_type") in VISION_TYPES)


def _unwrap(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_vision_model(model) -> bool:
    """Whether an HF model (or a PEFT wrapper of one) is a vision-language model."""
    return getattr(getattr(_unwrap(model), "config", None), "vision_config", None) is not None


def text_config(model):
    """The language tower's config (num_hidden_layers, heads, max_position_embeddings, ...)."""
    config = _unwrap(model).config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def vision_base(model):
    """The base model that merges image features into the token embeddings (`model.model` of every
    supported `*ForConditionalGeneration`): called with ids and images, it returns hidden states."""
    return _unwrap(model).model


def vision_parameters(model) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters outside the language tower and the LM head: the vision encoder and the projector
    that maps its features into the language model (frozen by default, `model.freeze_vision`)."""
    base = vision_base(model)
    language = {id(p) for p in base.language_model.parameters()}
    return [(n, p) for n, p in base.named_parameters() if id(p) not in language]


def vision_module_names(model) -> list[str]:
    """Names (from the model's root) of the modules outside the language tower and the LM head: the
    vision tower and projector, which LoRA leaves alone while they are frozen (peft `exclude_modules`)."""
    root = _unwrap(model)
    base = vision_base(model)
    prefix = next(n for n, m in root.named_modules() if m is base)
    language = {id(m) for m in base.language_model.modules()}
    return [f"{prefix}.{n}" for n, m in base.named_modules() if n and id(m) not in language]


def as_vision_tokenizer(tokenizer) -> "VisionTokenizer":
    """The `VisionTokenizer` of a VLM from what a caller holds: one already, or its processor (TRL's
    `processing_class`); a bare tokenizer cannot turn images into tensors (ValueError)."""
    if isinstance(tokenizer, VisionTokenizer):
        return tokenizer
    if getattr(tokenizer, "image_processor", None) is not None and getattr(tokenizer, "tokenizer", None) is not None:
        return VisionTokenizer(tokenizer)
    raise ValueError(f"a vision-language model needs its processor (AutoProcessor.from_pretrained(...), TRL's processing_class), "
                     f"got {type(tokenizer).__name__}")  # fmt: skip


def image_token_ids(model) -> tuple[int | None, int | None]:
    """(image token id, video token id) of a VLM's config (None when it has none)."""
    config = _unwrap(model).config
    return getattr(config, "image_token_id", None), getattr(config, "video_token_id", None)


# ------------------------------------------------------------------ images
def load_image(source, where: str = "image"):
    """A PIL RGB image from a path, bytes, a `datasets` Image dict ({"bytes", "path"}) or a PIL image;
    ValueError naming `where` and the file when it is missing or cannot be decoded."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(source, Image.Image):
        return source if source.mode == "RGB" else source.convert("RGB")
    if isinstance(source, dict) and ("bytes" in source or "path" in source):
        source = source.get("bytes") or source.get("path")
    if isinstance(source, (bytes, bytearray)):
        name, opener = f"{len(source)} bytes", lambda: io.BytesIO(source)
    elif isinstance(source, (str, os.PathLike)):
        name = str(source)
        if not Path(name).is_file():
            raise ValueError(f"{where}: image file {name!r} does not exist")
        opener = lambda: name  # noqa: E731
    else:
        raise ValueError(f"{where}: an image must be a path, bytes or a PIL image, got {type(source).__name__}")
    try:
        with Image.open(opener()) as probe:
            probe.verify()  # checks the file's structure without decoding it
        image = Image.open(opener())
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ValueError(f"{where}: image {name!r} cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    return image.convert("RGB")


def content_parts(content) -> list[dict]:
    """A message's content as a list of parts ({"type": "text", "text"}, {"type": "image", "image"}):
    what VLM chat templates read (TRL's `prepare_multimodal_messages` makes the same change)."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def prompt_images(prompt) -> list:
    """The image sources of a prompt, in order: the `image` of every {"type": "image"} content part."""
    if not isinstance(prompt, (list, tuple)):
        return []
    return [p.get("image") for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), (list, tuple))
            for p in m["content"] if isinstance(p, dict) and p.get("type") == "image"]  # fmt: skip


@dataclasses.dataclass(eq=False)
class VisionInputs:
    """The processor's image tensors of one prompt, on the CPU (pixel_values [P, D] and image_grid_thw
    [I, 3] for Qwen2-VL; pixel_values [1, I, C, H, W] and pixel_attention_mask for Idefics3; pixel_values
    [I, C, H, W] for Gemma 3), its images (PIL, in prompt order) and its chat-templated text before the
    processor expands the image placeholders (the two make vLLM's prompt: `multi_modal_data`).
    Shared, not copied, by the rows that continue the prompt."""

    tensors: dict[str, Tensor]
    images: tuple = ()
    text: str | None = None


class VisionPrompt(list):
    """A prompt's token ids (a list of ints, image placeholders expanded) with its `VisionInputs` as `.vision`."""

    def __init__(self, ids, vision: VisionInputs | None):
        super().__init__(int(t) for t in ids)
        self.vision = vision


class VisionTokenizer:
    """A VLM's tokenizer together with its processor (module docstring). Attributes it does not define are
    the tokenizer's; `encode_chat` is the one way a chat prompt with images becomes a `VisionPrompt`."""

    def __init__(self, processor):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self._warned = False

    def __getattr__(self, name: str):
        tokenizer = self.__dict__.get("tokenizer")  # absent while unpickling
        if tokenizer is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(tokenizer, name)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    @property
    def chat_template(self):
        return getattr(self.processor, "chat_template", None) or self.tokenizer.chat_template

    def save_pretrained(self, path, **kwargs):
        """Save the processor (its tokenizer, image processor and chat template), so the folder loads
        with `AutoProcessor`."""
        return self.processor.save_pretrained(path, **kwargs)

    def encode_chat(self, messages: list[dict], where: str = "prompt") -> VisionPrompt:
        """Token ids and image tensors of chat `messages` under the processor's chat template (with the
        generation prompt). Image parts may hold a path, bytes or a PIL image."""
        msgs, images = [], []
        for m in messages:
            parts = []
            for part in content_parts(m["content"]):
                if part.get("type") == "image":
                    image = load_image(part.get("image"), f"{where}: image {len(images) + 1}")
                    self._check_budget(image)
                    images.append(image)
                    part = {"type": "image", "image": image}
                parts.append(part)
            msgs.append({**m, "content": parts})
        out = self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                                 return_tensors="pt")  # fmt: skip
        ids = out["input_ids"][0].tolist()
        if not images:
            return VisionPrompt(ids, None)
        tensors = {k: v for k, v in out.items() if k not in _TOKEN_KEYS and isinstance(v, Tensor)}
        text = self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return VisionPrompt(ids, VisionInputs(tensors, tuple(images), text))

    def _check_budget(self, image) -> None:
        """Say once per run when an image is larger than the processor keeps (it resizes by its own rules)."""
        if self._warned:
            return
        budget = pixel_budget(self.processor.image_processor)
        w, h = image.size
        over = budget is not None and (w * h > budget[0] if budget[1] == "pixels" else max(w, h) > budget[0])
        if over:
            self._warned = True
            log.warning("an image of %dx%d is over the processor's budget (%s %d): the processor resizes it by its own "
                        "rules (said once per run)", w, h, "max pixels" if budget[1] == "pixels" else "longest edge",
                        budget[0])  # fmt: skip


def pixel_budget(image_processor) -> tuple[int, str] | None:
    """(limit, "pixels" | "edge"): the largest image a processor keeps as it is (Qwen2-VL: max_pixels;
    Idefics3 / SmolVLM: the longest edge), None when it always resizes to a fixed size (Gemma 3)."""
    max_pixels = getattr(image_processor, "max_pixels", None)
    size = getattr(image_processor, "size", None) or {}
    size = size if isinstance(size, dict) else getattr(size, "__dict__", {})
    if max_pixels is None and "shortest_edge" in size and "longest_edge" in size and hasattr(image_processor, "merge_size"):
        max_pixels = size["longest_edge"]  # Qwen2-VL's size holds pixel counts
    if max_pixels:
        return int(max_pixels), "pixels"
    if size.get("longest_edge"):
        return int(size["longest_edge"]), "edge"
    return None


# ------------------------------------------------------------------ the forward (engine prefill and learner)
def collate(inputs: list[VisionInputs]) -> dict[str, Tensor]:
    """The image tensors of several prompts as one batch: each key concatenated along dim 0 in prompt
    order, every other dim zero-padded to the largest (Idefics3's per-prompt image count; a zero image
    is dropped by the model), which is how each family's processor batches them."""
    out: dict[str, Tensor] = {}
    for key in dict.fromkeys(k for v in inputs for k in v.tensors):
        parts = [v.tensors[key] for v in inputs if key in v.tensors]
        shape = [max(p.shape[d] for p in parts) for d in range(parts[0].dim())]
        padded = []
        for p in parts:
            pad = []
            for d in reversed(range(1, p.dim())):
                pad += [0, shape[d] - p.shape[d]]
            padded.append(torch.nn.functional.pad(p, pad) if any(pad) else p)
        out[key] = torch.cat(padded)
    return out


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def forward_inputs(model, ids: Tensor, attention_mask: Tensor | None, vision: list[VisionInputs | None]) -> tuple[dict, Tensor | None]:
    """Keyword arguments of `vision_base(model)` for ids [B, L] (left-padded with `attention_mask` [B, L], or
    right-padded with None) whose row b has images `vision[b]` (None: a text row), and the next position
    [B] of each row (its last position + 1; with M-RoPE the text position after the prompt).

    Positions are explicit: M-RoPE [3, B, L] from the model's `get_rope_index` for a model that has it,
    else 0..len-1 over the real tokens (padding at 0); the token-type ids the model's forward takes are
    1 on image tokens, 2 on video tokens."""
    base = vision_base(model)
    device = ids.device
    rows = [v for v in vision if v is not None]
    kwargs: dict[str, Any] = {k: v.to(device) for k, v in collate(rows).items()} if rows else {}
    image_id, video_id = image_token_ids(model)
    types = torch.zeros_like(ids)
    if image_id is not None:
        types[ids == image_id] = 1
    if video_id is not None:
        types[ids == video_id] = 2
    for name in ("mm_token_type_ids", "token_type_ids"):
        if _accepts(base.forward, name):
            kwargs[name] = types
    mask = attention_mask if attention_mask is not None else torch.ones_like(ids)
    if hasattr(base, "get_rope_index"):  # Qwen2-VL / Qwen2.5-VL: 3-D positions
        given = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types,
                 "image_grid_thw": kwargs.get("image_grid_thw"), "video_grid_thw": kwargs.get("video_grid_thw")}  # fmt: skip
        params = inspect.signature(base.get_rope_index).parameters
        position_ids, _ = base.get_rope_index(**{k: v for k, v in given.items() if k in params})  # [3, B, L]
        position_ids = position_ids.masked_fill(mask[None] == 0, 0)
        nxt = position_ids.amax(dim=(0, 2)) + 1
    else:
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, L]
        nxt = mask.long().sum(-1)
    kwargs["position_ids"] = position_ids
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    return kwargs, nxt


def vision_hidden(model, ids: Tensor, vision: list[VisionInputs | None], attention_mask: Tensor | None = None,
                  prompt_lengths: Tensor | None = None) -> Tensor:  # fmt: skip
    """Last hidden states [B, L, H] (after the final norm) of ids [B, L] with their images.

    prompt_lengths [B]: tokens from there on are completion tokens; an image / video placeholder id
    among them is fed as token 0 instead. The engine stops a row at such a token (`vision_stop_ids`),
    so it can only be a row's last token, whose own output nothing reads: the model would otherwise
    look for image features for it."""
    if prompt_lengths is not None:
        completion = torch.arange(ids.shape[1], device=ids.device)[None] >= prompt_lengths.to(ids.device)[:, None]
        for tid in vision_stop_ids(model):
            ids = ids.masked_fill(completion & (ids == tid), 0)
    kwargs, _ = forward_inputs(model, ids, attention_mask, vision)
    return vision_base(model)(input_ids=ids, **kwargs).last_hidden_state


def vision_stop_ids(model) -> list[int]:
    """The image / video placeholder ids: a sampled one ends the row (the engine adds them to its stop ids
    whatever `ignore_eos` says), since the model takes such an id as a slot for image features."""
    return [t for t in image_token_ids(model) if t is not None]
