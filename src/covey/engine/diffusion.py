"""`masked_diffusion` engine: LLaDA's block-wise low-confidence remasking (docs/diffusion.md).

Checked against ML-GSAI/LLaDA `generate.py` (commit b7e6c3565f194352da44b38dd12b6970597309f3), which
d1 and ESPO copy:

    x = [prompt | M * L]                  L = SamplingParams.max_new_tokens (the canvas length)
    for each block b of `block_length` tokens, left to right, steps_b = steps / (L / block_length):
        n_transfer = split(#masked in the block, steps_b)    base n // steps_b, the first n % steps_b get +1
        for s in 1..steps_b:
            logits = model(x)                (cfg_scale > 0: un = model(x, prompt masked);
                                              logits = un + (cfg_scale + 1) (logits - un))
            x0   = argmax(logits - T log(-log u))   Gumbel-max, float64 (LLaDA: exp(logits) / (-log u)^T,
                                              the same argmax without overflow); T = 0 (greedy): argmax
            conf = softmax(logits)[x0] (low_confidence) or U(0, 1) (random);
                   -inf outside the current block and on revealed positions
            reveal the n_transfer[s] masked positions of highest confidence per row: x[pos] = x0[pos]

`unmask_step` [N, L] records the global step (0-based over all blocks) at which each completion token
was revealed, so every intermediate canvas is reconstructible (canvas_s = prompt + the tokens with
unmask_step < s, the rest masked); `reveal_logprob` [N, L] is log softmax(logits / T)[token] at that
step (T = 1 when greedy). Both come back on the `DiffusionGeneration` the engine returns.
One addition to LLaDA's code: the mask token's logit is -inf (a trained model never predicts it; an
untrained one could, and a "revealed" mask would be revealed again).

Options as in LLaDA: `logits_eos_inf` (EOS never sampled), `confidence_eos_eot_inf` (EOS and
`eot_token_id` revealed last; LLaDA's code sets the EOT *logits*, not the confidence, after x0 is
drawn: covey does what the option's name and Appendix B.4 say).

The engine returns what d1 and ESPO train on: `completion_ids` = the whole canvas (tokens after the
first EOS kept: the likelihood estimators read the canvas), `completion_mask` 1 up to and including
the first EOS, finish reason "stop" when an EOS exists else "length", behaviour log-probs 0 (a
diffusion model has no autoregressive log-prob: the learner recomputes pi_old with the configured
likelihood estimator). Rows are batched by prompt length (no padding). Deterministic given
`SamplingParams.seed`: each row's noise comes from its own generator (seed, row), drawn on the CPU.
Not supported (refused): top-p/top-k/min-p, per-prompt length limits, stop strings, entropies.
"""

from __future__ import annotations

import hashlib
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from covey.dtypes import model_device, resolve_dtype_name
from covey.engine.base import EngineCaps, Generation, SamplingParams, register_engine, version_tensor
from covey.models.diffusion import logit_shift, mask_token_id

__all__ = ["DiffusionGeneration", "MaskedDiffusionEngine", "canvas_plan", "transfer_counts"]


@dataclass
class DiffusionGeneration(Generation):
    """A `Generation` plus the reveal record: `unmask_step` [N, L] long and `reveal_logprob` [N, L] float32."""

    unmask_step: Tensor | None = None
    reveal_logprob: Tensor | None = None


def transfer_counts(masked: int, steps: int) -> list[int]:
    """LLaDA's `get_num_transfer_tokens` for one row: `masked` tokens over `steps` steps, the first
    `masked % steps` steps one more. split(10, 4) = [3, 3, 2, 2]."""
    base, extra = divmod(masked, steps)
    return [base + (1 if s < extra else 0) for s in range(steps)]


def canvas_plan(length: int, block_length: int | None, steps: int | None) -> tuple[int, int]:
    """(block_length, steps per block) for a canvas of `length` tokens; defaults one block, one token
    per step. ValueError when the block does not divide the canvas or the steps the blocks."""
    block = block_length or length
    steps = steps or length
    if length % block:
        raise ValueError(f"masked_diffusion: block_length={block} must divide the canvas length max_new_tokens={length}")
    blocks = length // block
    if steps % blocks:
        raise ValueError(f"masked_diffusion: steps={steps} must be a multiple of the number of blocks ({blocks})")
    return block, steps // blocks


def _row_seed(seed: int, row: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{row}".encode()).digest()[:8], "little") >> 1


@register_engine("masked_diffusion")
class MaskedDiffusionEngine:
    """Generation for the masked-diffusion family (module docstring).

    block_length: tokens per block (default: the whole canvas, one block); must divide max_new_tokens.
    steps:        denoising steps over the whole canvas (default: one token per step); a multiple of
                  the number of blocks.
    remasking:    low_confidence (reveal the most confident predictions) or random.
    cfg_scale:    unsupervised classifier-free guidance (0 = off).
    dtype:        fp32, bf16 (autocast) or auto (follows the learner).
    """

    pad_token_id: int
    version: int
    caps = EngineCaps(family="masked_diffusion")  # the model family it generates with (`covey.family`)

    def __init__(
        self,
        model,
        tokenizer=None,
        *,
        block_length: Annotated[int, Field(ge=1)] | None = None,
        steps: Annotated[int, Field(ge=1)] | None = None,
        remasking: Literal["low_confidence", "random"] = "low_confidence",
        cfg_scale: Annotated[float, Field(ge=0.0)] = 0.0,
        logits_eos_inf: bool = False,
        confidence_eos_eot_inf: bool = False,
        eot_token_id: int | None = None,
        dtype: Literal["fp32", "bf16", "auto"] = "fp32",
    ):
        self.model, self.tokenizer = model, tokenizer
        self.device = model_device(model)
        self.block_length, self.steps, self.remasking, self.cfg_scale = block_length, steps, remasking, cfg_scale
        self.logits_eos_inf, self.confidence_eos_eot_inf, self.eot_token_id = logits_eos_inf, confidence_eos_eot_inf, eot_token_id
        hidden = getattr(getattr(model, "config", None), "hidden_size", 1024)
        self.dtype = torch.bfloat16 if resolve_dtype_name(dtype, self.device, hidden) == "bf16" else torch.float32
        self.mask_id = mask_token_id(model, tokenizer)
        self.shift = logit_shift(model)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            eos = getattr(getattr(model, "config", None), "eos_token_id", None)
        self.eos_id = int(eos[0] if isinstance(eos, (list, tuple)) else eos) if eos is not None else None
        self.version = 0

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def load_weights(self, source, version: int | None = None) -> None:
        """The learner's weights (a model or a state dict); free when the engine holds the learner's model."""
        if source is not self.model:
            state = source.state_dict() if hasattr(source, "state_dict") else dict(source)
            self.model.load_state_dict(state, strict=False)
        self.version = self.version + 1 if version is None else int(version)

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ generation
    def plan(self, length: int) -> tuple[int, int]:
        """(block_length, steps per block) for a canvas of `length` tokens (`canvas_plan`)."""
        return canvas_plan(length, self.block_length, self.steps)

    def generate(self, prompts, n: int, sampling: SamplingParams) -> DiffusionGeneration:
        sp = sampling
        if sp.top_p != 1.0 or sp.top_k or sp.min_p:
            raise ValueError("masked_diffusion: top_p, top_k and min_p are not supported (Gumbel-max over the full distribution)")
        if sp.stop_strings or sp.return_entropies:
            raise ValueError("masked_diffusion: stop strings and entropies are not supported")
        length = sp.max_new_tokens
        if sp.prompt_max_new_tokens is not None and min(sp.prompt_max_new_tokens) < length:
            raise ValueError("masked_diffusion: per-prompt length limits are not supported (the canvas has one length)")
        if n < 1 or not prompts:
            raise ValueError("masked_diffusion: give at least one prompt and n >= 1")
        plist = [[int(t) for t in (p.tolist() if isinstance(p, Tensor) else p)] for p in prompts]
        if any(not p for p in plist):
            raise ValueError("masked_diffusion: every prompt needs at least one token")
        block, steps_b = self.plan(length)
        seed = sp.seed if sp.seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        temperature = 0.0 if sp.greedy else float(sp.temperature)
        rows = [(p, i) for i, p in enumerate(plist) for _ in range(n)]  # row r continues prompt r // n
        canvas = torch.zeros(len(rows), length, dtype=torch.long)
        steps_at = torch.zeros(len(rows), length, dtype=torch.long)
        reveal_lp = torch.zeros(len(rows), length, dtype=torch.float32)
        by_len: dict[int, list[int]] = {}
        for r, (p, _) in enumerate(rows):
            by_len.setdefault(len(p), []).append(r)
        for idx in by_len.values():
            gens = [torch.Generator().manual_seed(_row_seed(seed, r)) for r in idx]
            prompt = torch.tensor([rows[r][0] for r in idx], device=self.device)
            x, s_at, lp = self._denoise(prompt, length, block, steps_b, temperature, gens)
            canvas[idx], steps_at[idx], reveal_lp[idx] = x.cpu(), s_at.cpu(), lp.cpu()
        mask, reasons = self._completion_mask(canvas)
        return DiffusionGeneration(
            prompt_ids=[torch.tensor(p, dtype=torch.long) for p, _ in rows],
            completion_ids=canvas,
            completion_mask=mask,
            logprobs=torch.zeros(len(rows), length),
            finish_reason=reasons,
            prompt_index=torch.tensor([i for _, i in rows], dtype=torch.long),
            policy_version=version_tensor(mask, self.version),
            unmask_step=steps_at,
            reveal_logprob=reveal_lp,
        )

    def _completion_mask(self, canvas: Tensor) -> tuple[Tensor, list[str]]:
        """1 up to and including the first EOS (all ones without one), and the finish reasons."""
        if self.eos_id is None:
            return torch.ones(canvas.shape), ["length"] * len(canvas)
        is_eos = canvas == self.eos_id
        seen_before = (is_eos.cumsum(-1) - is_eos.long()) > 0  # an EOS strictly before this position
        reasons = ["stop" if bool(e.any()) else "length" for e in is_eos]
        return (~seen_before).float(), reasons

    def logits(self, x: Tensor) -> Tensor:
        """[R, S, V] float32 logits aligned so that position i predicts token i (Dream's shift undone)."""
        ctx = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.dtype == torch.bfloat16 else nullcontext()
        with ctx:
            out = self.model(input_ids=x).logits.float()
        if self.shift:
            out = torch.cat([out[:, :1], out[:, :-1]], 1)
        return out

    @torch.no_grad()
    def _denoise(self, prompt: Tensor, length: int, block: int, steps_b: int, temperature: float, gens):
        r, plen = prompt.shape
        x = torch.cat([prompt, torch.full((r, length), self.mask_id, dtype=torch.long, device=self.device)], 1)
        s_at = torch.full((r, length), -1, dtype=torch.long, device=self.device)
        rev_lp = torch.zeros(r, length, device=self.device)
        step = 0
        for b in range(length // block):
            lo, hi = plen + b * block, plen + (b + 1) * block
            counts = [transfer_counts(int((x[j, lo:hi] == self.mask_id).sum()), steps_b) for j in range(r)]
            for s in range(steps_b):
                logits = self.logits(x)
                if self.cfg_scale > 0:
                    un = x.clone()
                    un[:, :plen] = self.mask_id
                    un_logits = self.logits(un)
                    logits = un_logits + (self.cfg_scale + 1) * (logits - un_logits)
                z = logits[:, lo:hi].double()  # [R, block, V]: only the current block can be revealed
                z[..., self.mask_id] = float("-inf")  # a revealed token is never the mask itself
                if self.logits_eos_inf and self.eos_id is not None:
                    z[..., self.eos_id] = float("-inf")
                if temperature > 0:
                    u = torch.stack([torch.rand(z.shape[1:], generator=g, dtype=torch.float64) for g in gens]).to(self.device)
                    x0 = (z - temperature * torch.log(-torch.log(u))).argmax(-1)
                else:
                    x0 = z.argmax(-1)
                if self.remasking == "low_confidence":
                    conf = torch.softmax(z, -1).gather(-1, x0[..., None]).squeeze(-1)
                else:
                    conf = torch.stack([torch.rand(block, generator=g, dtype=torch.float64) for g in gens]).to(self.device)
                if self.confidence_eos_eot_inf:
                    for tok in (self.eos_id, self.eot_token_id):
                        if tok is not None:
                            conf = conf.masked_fill(x0 == tok, -1e300)  # last among the masked, never a revealed one
                masked = x[:, lo:hi] == self.mask_id
                conf = conf.masked_fill(~masked, float("-inf"))
                lp = torch.log_softmax(z / (temperature if temperature > 0 else 1.0), -1).gather(-1, x0[..., None]).squeeze(-1)
                for j in range(r):
                    k = counts[j][s]
                    if k == 0:
                        continue
                    pick = torch.topk(conf[j], k).indices
                    x[j, lo + pick] = x0[j, pick]
                    s_at[j, lo - plen + pick] = step
                    rev_lp[j, lo - plen + pick] = lp[j, pick].float()
                step += 1
        return x[:, plen:], s_at, rev_lp
