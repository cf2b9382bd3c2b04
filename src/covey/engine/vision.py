"""The torch engine's decode backend for vision-language models (docs/vlm.md).

`TorchEngine` runs one decode loop (sampling, stops, per-prompt limits, compaction, interrupts) over a
backend that prefills prompts and decodes one token per row. For a Llama-family LM that backend is
covey's hand-written forward (`covey.engine.forward`); for a VLM it is this one, the HF model's own
forward with its KV cache (`DynamicCache`), because the image features enter through the model's
vision tower and, for Qwen2-VL, positions are 3-D (M-RoPE):

    prefill   the wave's distinct prompts, left-padded, `prefill_rows` per forward: the vision tower
              runs once per prompt, its features are scattered into the image tokens, and the prompt's
              KV cache rows are kept; logits of the last position = lm_head(final hidden state)
    repeat    each prompt's cache rows repeated n times: the group's n completions share one image
              prefill
    step      one token per row at its text position: 0..len-1 over the prompt's real tokens, plus the
              M-RoPE offset (the prompt's last 3-D position + 1 minus its length) for Qwen2-VL
    keep      compaction: the cache rows of the rows still running

Positions, token types and image tensors come from `covey.models.vision.forward_inputs`, the function
the learner's forward uses, so the behaviour log-probs equal the learner's (fp32: within 1e-5, tested).
`engine.dtype: bf16` runs the forward under bf16 autocast (the weights stay the model's). A model with
sliding-window layers (Gemma 3) is refused when a prompt plus its completion exceeds the window (the
cache here keeps every column).
"""

from __future__ import annotations

import torch
from torch import Tensor

from covey.models.vision import forward_inputs, text_config, vision_base

__all__ = ["VisionDecode", "kv_row_bytes"]


def kv_row_bytes(model, length: int, itemsize: int) -> int:
    """Bytes of one row's KV cache of `length` columns (keys and values, every layer)."""
    cfg = text_config(model)
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * length * itemsize


def check_window(model, length: int) -> None:
    """ValueError when a prompt plus completion of `length` tokens exceeds a sliding-window layer's window."""
    cfg = text_config(model)
    window = getattr(cfg, "sliding_window", None)
    if window and "sliding_attention" in (getattr(cfg, "layer_types", None) or ()) and length > window:
        raise ValueError(f"a prompt plus max_new_tokens of {length} tokens exceeds the model's sliding window ({window}); "
                         "the torch engine keeps every cache column for vision-language models: lower max_new_tokens")  # fmt: skip


class VisionDecode:
    """One wave's prefill and decode steps for a VLM (module docstring). `vision[p]`: the image inputs of
    the wave's prompt p (None: a text prompt)."""

    def __init__(self, model, vision: list, dtype: torch.dtype, prefill_rows: int):
        self.model, self.vision, self.prefill_rows = model, vision, prefill_rows
        self.base, self.head = vision_base(model), model.get_output_embeddings()
        self.mrope = hasattr(self.base, "get_rope_index")
        self.autocast = dtype == torch.bfloat16
        self.cache = None
        self.offset: Tensor | None = None  # [rows] M-RoPE offset of each row's text positions

    def _run(self, **kwargs):
        dev = next(self.model.parameters()).device
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.autocast):
            out = self.base(use_cache=True, **kwargs)
            logits = self.head(out.last_hidden_state[:, -1]).float()  # [B, V]
        return logits, out.past_key_values

    def prefill(self, ids: Tensor, valid: Tensor, dense=None) -> Tensor:
        """Logits [U, V] after each left-padded prompt ids [U, P] (valid [U, P] marks real tokens)."""
        logits, caches, offsets = [], [], []
        for a in range(0, ids.shape[0], self.prefill_rows):
            b = min(ids.shape[0], a + self.prefill_rows)
            mask = valid[a:b].long()
            kwargs, nxt = forward_inputs(self.model, ids[a:b], mask, self.vision[a:b])
            out, cache = self._run(input_ids=ids[a:b], **kwargs)
            logits.append(out)
            caches.append(cache)
            offsets.append(nxt - mask.sum(-1))
        self.cache = caches[0]
        for layer, *others in zip(self.cache.layers, *(c.layers for c in caches[1:])):
            if others:
                layer.keys = torch.cat([layer.keys] + [o.keys for o in others])
                layer.values = torch.cat([layer.values] + [o.values for o in others])
        self.offset = torch.cat(offsets)
        return torch.cat(logits)

    def repeat(self, n: int, used: int) -> None:
        """Each prompt's cache rows n times, in place (rows u*n .. u*n+n-1 continue prompt u)."""
        for layer in self.cache.layers:
            layer.batch_repeat_interleave(n)
        self.offset = self.offset.repeat_interleave(n)

    def step(self, tok: Tensor, pos: Tensor, col: int, valid: Tensor) -> Tensor:
        """Logits [R, V] after feeding tok [R] at text positions pos [R] (cache column `col`; valid [R, S])."""
        p = (pos + self.offset)[:, None]  # [R, 1]
        position_ids = p[None].expand(3, -1, -1) if self.mrope else p
        logits, self.cache = self._run(input_ids=tok[:, None], attention_mask=valid[:, : col + 1].long(),
                                       position_ids=position_ids, past_key_values=self.cache)  # fmt: skip
        return logits

    def keep(self, index: Tensor, used: int) -> None:
        """Keep the cache rows `index` (compaction)."""
        for layer in self.cache.layers:
            layer.batch_select_indices(index)
        self.offset = self.offset[index]
