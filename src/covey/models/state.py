"""What the engine and a checkpoint take from a policy: the plain model an engine is built from, the
weights a weight sync loads (LoRA merged), and the trainable weights a checkpoint keeps."""

from __future__ import annotations

import copy

import torch

__all__ = ["engine_model", "engine_state", "trainable_state"]


def engine_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain HF model an engine is built from. With LoRA the engine gets its own copy of the
    base model (it must never write merged weights into the learner's base weights)."""
    if hasattr(model, "get_base_model"):
        return copy.deepcopy(model).merge_and_unload()
    return model


def engine_state(model: torch.nn.Module):
    """What `engine.load_weights` loads: the model itself, or for LoRA the merged weights
    W + scale * B @ A under the base model's parameter names (computed, the learner is untouched)."""
    if not hasattr(model, "get_base_model"):
        return model
    from peft.tuners.lora import LoraLayer

    out = {}
    with torch.no_grad():
        for name, module in model.get_base_model().named_modules():
            if isinstance(module, LoraLayer):
                base = module.get_base_layer()
                delta = sum(module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A)
                out[f"{name}.weight"] = base.weight + delta
                if getattr(base, "bias", None) is not None:  # Qwen2's q/k/v biases: kept under the base layer's name
                    out[f"{name}.bias"] = base.bias
        for name, p in model.get_base_model().named_parameters():
            if "lora_" not in name and ".base_layer." not in name:
                out[name] = p
    return out


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights a checkpoint must hold: every trainable parameter (all weights, or the LoRA adapter)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
