"""A sequence-classification model as a reward (TRL's reward models), and reward-model detection.

TRL (1.16 `GRPOTrainer._calculate_rewards`, checked against the installed trl==1.16.0) scores a
reward model like this, and so does `ModelReward`:

    text   = apply_chat_template(prompt + completion messages)   conversational prompts
           = prompt + completion                                 plain text
    inputs = tokenizer(texts, padding=True, padding_side="right", add_special_tokens=False)
    reward = model(**inputs).logits[:, 0]                        under torch.inference_mode()

with the tokenizer's pad token set to its EOS when it has none, and the model's
``config.pad_token_id`` set to the tokenizer's (the classifier reads the last non-pad token).
Differences: covey scores in batches of `batch_size` rows (TRL: the whole batch at once; the scores
are the same up to float rounding) and runs the model in the calling process, never in a reward
worker (one copy of the weights).

The model is a model id or local folder (loaded with ``AutoModelForSequenceClassification
.from_pretrained(..., num_labels=1)`` on first use, so a config check does not load it) or a model
object; the tokenizer is `tokenizer`, else the one saved with the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from covey.rewards.registry import register_reward

__all__ = ["ModelReward", "is_reward_model"]


def is_reward_model(obj) -> bool:
    """True for a torch module with a HF config (what TRL treats as a reward model)."""
    import torch

    return isinstance(obj, torch.nn.Module) and hasattr(obj, "config")


def _check_hub_id(name: str) -> None:
    """A hub id is ``owner/name``; offline (HF_HUB_OFFLINE=1) it must already be in the local cache."""
    if name.count("/") != 1 or not all(name.split("/")):
        raise ValueError(f"reward_model: {name!r} is neither a model folder nor a hub id 'owner/name'")
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE and not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise ValueError(f"reward_model: {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set")


@register_reward("reward_model")
class ModelReward:
    """Reward = logit 0 of a sequence-classification model on prompt + completion (see the module doc).

    model:      model id, local folder, or a loaded model (e.g. `AutoModelForSequenceClassification`).
    tokenizer:  its tokenizer (a loaded one, or a folder/id); default: the model's own.
    batch_size: rows per forward pass.
    max_length: truncate longer texts to this many tokens (None: no truncation, as TRL).
    device:     where a model loaded from an id/folder runs (default: CUDA when present, else CPU);
                a model object stays where it is.
    """

    in_process = True  # the runner never ships the weights to a worker

    def __init__(self, model: Any, tokenizer: Any = None, batch_size: int = 16, max_length: int | None = None,
                 device: str | None = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"reward_model: batch_size must be a positive int, got {batch_size!r}")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"reward_model: max_length must be a positive int or None, got {max_length!r}")
        if isinstance(model, (str, os.PathLike)):
            p = Path(model).expanduser()
            looks_local = p.exists() or str(model).startswith((".", "/", "~")) or str(model).count("/") > 1
            if looks_local and not (p / "config.json").is_file():
                raise ValueError(f"reward_model: {str(model)!r} is not a model folder (no config.json there)")
            if not looks_local:
                _check_hub_id(str(model))
            self.name = p.name if p.exists() else str(model).rstrip("/").rpartition("/")[2]
            model = str(p.resolve()) if p.exists() else str(model)
        elif is_reward_model(model):
            self.name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__).rstrip("/").rpartition("/")[2]
            self.name = self.name or type(model).__name__
        else:
            raise ValueError(f"reward_model: model must be a model id, a folder or a loaded model, got {type(model).__name__}")
        self.__name__ = self.name  # the reward's column name
        self._model, self._tokenizer, self.batch_size, self.max_length = model, tokenizer, batch_size, max_length
        self.device = device
        self._ready = False

    def _load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        source = self._model if isinstance(self._model, str) else getattr(self._model.config, "_name_or_path", "")
        if isinstance(self._model, str):
            import torch

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._model = AutoModelForSequenceClassification.from_pretrained(self._model, num_labels=1).to(device).eval()
        if self._tokenizer is None or isinstance(self._tokenizer, (str, os.PathLike)):
            where = self._tokenizer or source
            if not where:
                raise ValueError("reward_model: the model object has no name_or_path to load a tokenizer from; pass "
                                 "tokenizer= (GRPOTrainer: reward_processing_classes=)")
            self._tokenizer = AutoTokenizer.from_pretrained(str(where))
        tok = self._tokenizer
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        text_config = self._model.config.get_text_config() if hasattr(self._model.config, "get_text_config") else self._model.config
        text_config.pad_token_id = tok.pad_token_id  # the classifier scores the last non-pad token
        self._model.config.pad_token_id = tok.pad_token_id
        self._ready = True

    def texts(self, prompts, completions) -> list[str]:
        """What the model reads: the chat template over prompt + completion messages, or prompt + completion."""
        out = []
        for p, c in zip(prompts, completions):
            if isinstance(p, list):  # conversational (the runner gives chat prompts message-list completions)
                msgs = p + (c if isinstance(c, list) else [{"role": "assistant", "content": c}])
                out.append(self._tokenizer.apply_chat_template(msgs, tokenize=False))
            else:
                out.append(str(p) + (c if isinstance(c, str) else c[0]["content"]))
        return out

    def __call__(self, prompts, completions, **_) -> list[float]:
        import torch

        if not self._ready:
            self._load()
        texts = self.texts(prompts, completions)
        device = next(self._model.parameters()).device
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self._tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                  padding_side="right", add_special_tokens=False,
                                  truncation=self.max_length is not None, max_length=self.max_length)
            with torch.inference_mode():
                logits = self._model(**{k: v.to(device) for k, v in enc.items()}).logits
            scores.extend(logits[:, 0].float().tolist())
        return scores
