"""Loading a vision-language model from a local folder (or a cached hub id): `AutoModelForImageTextToText`
and `AutoProcessor`, offline (docs/vlm.md).

transformers' Qwen2-VL / Qwen2.5-VL processors include a video processor that needs torchvision; on a
machine without it `AutoProcessor` fails (or returns the tokenizer alone), and the processor is rebuilt
from its parts (`AutoImageProcessor`, which picks the PIL backend, `AutoTokenizer` and the folder's chat
template) without the video processor (`ImageOnlyQwen2VLProcessor`). Other families need their own
processor class to load.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen2VLProcessor
from transformers.processing_utils import ProcessorMixin

__all__ = ["ImageOnlyQwen2VLProcessor", "load_vision"]


class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
    """A Qwen2-VL / Qwen2.5-VL processor without a video processor (transformers' needs torchvision):
    images only, everything else is `Qwen2VLProcessor`'s. A saved folder names `Qwen2VLProcessor`, so
    `AutoProcessor` builds the full one where torchvision is installed."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "processor_class": "Qwen2VLProcessor"}

_IMAGE_ONLY = ("qwen2_vl", "qwen2_5_vl")  # processors covey can rebuild without a video processor


def load_vision(source, torch_dtype: torch.dtype, *, local_only: bool = True, trust_remote_code: bool = False):
    """(model in eval mode, `VisionTokenizer`) of a VLM folder or cached hub snapshot."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from covey.models.vision import VisionTokenizer

    remote = {"trust_remote_code": True} if trust_remote_code else {}
    model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch_dtype, local_files_only=local_only, **remote)
    try:
        processor = AutoProcessor.from_pretrained(source, local_files_only=local_only, **remote)
        why = "AutoProcessor gave a tokenizer only"
    except (ImportError, ValueError, OSError, TypeError, AttributeError) as e:  # no torchvision for the video processor
        processor, why = None, f"{type(e).__name__}: {str(e)[:200]}"
    if not isinstance(processor, ProcessorMixin) or getattr(processor, "image_processor", None) is None:
        processor = _rebuild(source, model.config, local_only, why)
    return model.eval(), VisionTokenizer(processor)


def _rebuild(source, config, local_only: bool, why: str):
    from transformers import AutoImageProcessor, AutoTokenizer

    kind = getattr(config, "model_type", None)
    if kind not in _IMAGE_ONLY:
        raise ValueError(f"cannot load the processor of {source} (model_type {kind}): {why}")
    image_processor = AutoImageProcessor.from_pretrained(source, local_files_only=local_only)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    template = Path(source) / "chat_template.jinja"
    chat_template = template.read_text() if template.is_file() else getattr(tokenizer, "chat_template", None)
    return ImageOnlyQwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template)
