"""Loading a vision-language model from a local folder (or a cached hub id): `AutoModelForImageTextToText`
and `AutoProcessor`, offline (docs/vlm.md).

transformers' Qwen2-VL / Qwen2.5-VL processors include a video processor that needs torchvision; on a
machine without it `AutoProcessor` fails (or returns the tokenizer alone), and the processor is rebuilt
from its parts (`AutoImageProcessor`, which picks the PIL backend, `AutoTokenizer` and the folder's chat
template) without the video processor (`covey.models.tiny_vision.image_only_processor`). Other families
need their own processor class to load.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["load_vision"]

_IMAGE_ONLY = ("qwen2_vl", "qwen2_5_vl")  # processors covey can rebuild without a video processor


def load_vision(source, torch_dtype: torch.dtype, *, local_only: bool = True, trust_remote_code: bool = False):
    """(model in eval mode, `VisionTokenizer`) of a VLM folder or cached hub snapshot."""
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from transformers.processing_utils import ProcessorMixin

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

    from covey.models.tiny_vision import image_only_processor

    kind = getattr(config, "model_type", None)
    if kind not in _IMAGE_ONLY:
        raise ValueError(f"cannot load the processor of {source} (model_type {kind}): {why}")
    image_processor = AutoImageProcessor.from_pretrained(source, local_files_only=local_only)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    template = Path(source) / "chat_template.jinja"
    chat_template = template.read_text() if template.is_file() else getattr(tokenizer, "chat_template", None)
    return image_only_processor(image_processor, tokenizer, chat_template)
