"""`TorchEngine`: batched generation on CPU or one CUDA GPU around an HF Llama-family model.

Per `generate` call: the distinct prompts are left-padded and prefilled once (in row chunks), their
KV cache rows are repeated `n` times, then a decode loop samples one token per active row per step
into a pre-allocated cache (`covey.engine.forward`). More than `max_rows` rows run in waves of
whole prompts (bounds the cache memory; the tokens do not depend on the waves). Rows that hit a
stop token or stop string are dropped from the active batch once a fraction `compact_fraction` of
it has finished (compaction: one index copy of the cache), so long tails do not pay for them.

Dtypes: "fp32" uses the model's own fp32 parameters when the model is fp32 (no copy;
`load_weights` is then free); "bf16" keeps a fused (q/k/v, gate/up) bf16 copy (oneDNN pre-packed
on CPU), refreshed in place and repacked by `load_weights` (~0.1-0.3 s for 135M parameters);
"auto" picks one for the device (`covey.dtypes`: bf16 on CUDA, measured on CPU).

Devices: the engine runs where the model's parameters are; every tensor it creates (cache, ids,
masks, sampling buffers, stop tables) is made there. The sampling uniforms are drawn on the CPU
from the seeded generator and moved, so a seeded run draws the same numbers on every device (the
tokens then agree up to the devices' rounding of the logits). The returned `Generation` is on the
CPU (rewards and advantages work there; the learner moves what it needs). On CUDA the decode loop
does not synchronise with the host each token: finished rows are only counted (for early exit
and compaction) every `sync_every` steps (default 8 on CUDA, 1 on CPU), and never when no row can
finish early (no stop tokens, no stop strings, no per-prompt limits: `ignore_eos` benchmarks); rows
that finished in between keep decoding into positions that are masked out. Host tables (prompts,
limits, the call's uniforms) go to the GPU once per call through pinned memory without waiting,
and the results come back in one synchronisation. Stop strings need the host each step.
`covey.devices.host_reads_free` is the one switch between the two behaviours (tests run the CUDA
path on the CPU through it and count the host reads: tests/engine/test_host_syncs.py).

Reproducibility: with `SamplingParams.seed` set, the same prompts, n and settings give the same
tokens; each (row, step) draws from its own pre-drawn uniform (see `covey.engine.sampling`), so
results do not depend on compaction. Log-probs and entropies are of the tempered full
distribution; see `covey.engine.sampling` for that choice.

Per-prompt limits: `SamplingParams.prompt_max_new_tokens` gives each prompt of the call its own
token budget (at most `max_new_tokens`); a row reaching it finishes with reason "length", like one
reaching the global limit, and leaves the active batch at the next compaction. The uniforms are
still drawn for `max_new_tokens` steps, so a limited row's tokens equal the unlimited run's up to
its limit.

Vision-language models (docs/vlm.md): the same loop over another backend, `covey.engine.vision`
(the HF model's forward and KV cache: the vision tower runs once per distinct prompt, the group's n
rows share that prefill); prompts come as `covey.models.vision.VisionPrompt`s carrying their images,
and the rows' image inputs come back in `Generation.vision`. No tree sessions, hidden states or int8
there (refused when the config is read, `covey.family`); scoring, soft thinking and regeneration are
refused when called.

Protocols (`covey.engine.base`): `Engine`, `ForkingEngine` (`tree_session` opens a
`covey.engine.tree.TreeDecoder` on this engine's weights: tree, partial and pruned rollouts) and
`HiddenStatesEngine` (`hidden_states`: final hidden states from the same weights, for arrol and
tppo). Continuing a partial completion (APRIL) = a tree session row started from prompt + partial.
The chat template is the caller's business (`covey.models.apply_chat`). Not covered:
sliding-window attention, PEFT-wrapped models (pass the merged weights to `load_weights`),
architectures outside `forward.SUPPORTED`.
"""

from __future__ import annotations

import threading
from typing import Literal

import torch
from torch import Tensor

from covey.devices import host_reads_free
from covey.engine.base import EngineCaps, Generation, SamplingParams, concat_generations, register_engine, version_tensor
from covey.dtypes import model_device, resolve_dtype_name
from covey.engine.forward import SUPPORTED, decode_step, head_logits, hidden_states, new_cache, pack_weights, prefill
from covey.engine.sampling import sample_tokens, validate_sampling
from covey.engine.stops import StopStrings
from covey.engine.tree import TreeDecoder
from covey.models.vision import VISION_TYPES, is_vision_model, text_config, vision_stop_ids

__all__ = ["TorchEngine"]

_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32}


@register_engine("torch")
class TorchEngine:
    """Engine over an HF causal LM (model_type llama / qwen2 / qwen3 / mistral).

    model:            the HF model (its weights are read, never modified).
    dtype:            "bf16" (copy of the weights; fastest on AMX CPUs and GPUs), "fp32" or "auto".
    tokenizer:        needed for stop strings and for the default EOS ids.
    compaction:       drop finished rows from the active batch (False: keep them to the end).
    compact_fraction: compact when at least this fraction of the active rows has finished.
    prefill_rows:     prompts prefilled per forward (bounds the [rows, heads, P, P] attention memory).
    max_rows:         rows decoded together; more prompts x n run in waves (bounds KV cache memory).
    max_cache_bytes:  fewer rows per wave when the KV cache of max_rows would exceed this (2 GiB).
    max_positions:    longest prompt + completion (default: the model's max_position_embeddings).
    sync_every:       decode steps between host checks for finished rows (default 1 on CPU, 8 on CUDA).
    quantize:         "int8": generate with int8 decoder linears (CPU; Sol-RL-style low-precision
                      rollouts while the learner trains in full precision; `forward` module
                      docstring); "fp8": float8 e4m3 linears (CUDA with fp8 matmuls); re-quantized
                      from the learner's weights at every `load_weights`. `regenerate` samples
                      chosen rows again on the unquantized weights (`RegeneratingEngine`).

    Public facts (the tree decoder reads them): `weights` (the packed `DecoderWeights`), `dtype`,
    `device`, `eos_ids`, `max_positions`, `model`, `tokenizer`.
    """

    pad_token_id: int
    """Right-pads completions (the tokenizer's pad id, else 0)."""
    temperature_rules = True
    """Applies `SamplingParams.temperature_rule` (the `TemperatureRuleEngine` protocol)."""
    low_precision = False
    """Whether `generate` samples through quantized weights (`quantize` set; `RegeneratingEngine`)."""
    version: int
    """Policy version of the loaded weights (0 at start; set by `load_weights`)."""

    def __init__(
        self,
        model,
        tokenizer=None,
        *,
        dtype: str = "bf16",
        pad_token_id: int | None = None,
        compaction: bool = True,
        compact_fraction: float = 0.25,
        prefill_rows: int = 16,
        max_rows: int = 256,
        max_cache_bytes: int = 2 << 30,
        max_positions: int | None = None,
        sync_every: int | None = None,
        quantize: Literal["int8", "fp8"] | None = None,
    ):
        if dtype != "auto" and dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES) + ['auto']}, got {dtype!r}")
        if not 0.0 < compact_fraction <= 1.0:
            raise ValueError(f"compact_fraction must be in (0, 1], got {compact_fraction}")
        self.model = model
        self.tokenizer = tokenizer
        self.device = model_device(model)
        self.vision = is_vision_model(model)  # a vision-language model: the HF-forward backend (covey.engine.vision)
        config = text_config(model) if self.vision else model.config
        self.dtype = _DTYPES[resolve_dtype_name(dtype, self.device, getattr(config, "hidden_size", 1024))]
        if sync_every is not None and sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.sync_every = int(sync_every or (1 if host_reads_free(self.device) else 8))
        self.compaction = compaction
        self.compact_fraction = compact_fraction
        self.prefill_rows = max(1, int(prefill_rows))
        self.max_rows = max(1, int(max_rows))
        self.max_cache_bytes = int(max_cache_bytes)
        self._elt = self.dtype.itemsize
        self.max_positions = int(max_positions or getattr(config, "max_position_embeddings", 4096))
        if quantize == "int8" and self.device.type != "cpu":
            raise ValueError(f"quantize={quantize!r} runs on the CPU only (torch's quantized linear); the model is on {self.device}")
        if quantize is not None and self.vision:
            raise ValueError(f"quantize={quantize!r} covers the hand-written Llama-family forward, not a vision-language model")
        self.quantize = quantize
        self.low_precision = quantize is not None
        self.weights = None if self.vision else pack_weights(model, self.dtype, self.max_positions, quantize)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0] if self.vision else self.weights.embed.shape[0])
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad_token_id) if pad_token_id is not None else 0
        self.eos_ids = _eos_ids(model, tokenizer)
        self.vision_stops = vision_stop_ids(model) if self.vision else []
        self._stops: dict[tuple[str, ...], StopStrings] = {}
        self._scratch: dict = {}  # sampling work tensors reused across steps
        self.version = 0  # policy version of the loaded weights (load_weights)
        self._lock = threading.Lock()
        self._running = False  # a generate call is in flight
        self._stop = threading.Event()  # set by interrupt(); read once per decode step

    @staticmethod
    def check_config(params: dict, sampling, needs: set[str], device: str) -> None:
        """Config-time check (`covey.compat.check_engine_config`): int8 generation runs on
        the CPU only, fp8 on a CUDA device with fp8 matmuls."""
        if params.get("quantize") == "int8" and device.startswith("cuda"):
            raise ValueError(f"engine 'torch' quantize={params['quantize']!r} runs on the CPU only (torch's quantized "
                             "linear), but device is cuda: use device: cpu, quantize: fp8, or no quantize")  # fmt: skip
        if params.get("quantize") == "fp8":
            from covey.engine.forward import check_fp8

            check_fp8(device)

    caps = EngineCaps(model_types=SUPPORTED + VISION_TYPES, check_config=check_config, takes_images=True)

    # ------------------------------------------------------------------ weights
    @property
    def shares_weights(self) -> bool:
        """True when the engine reads the model's parameters directly (load_weights is free)."""
        return True if self.vision else _shares(self.weights, self.model)

    @torch.no_grad()
    def load_weights(self, source, version: int | None = None) -> None:
        """Load the learner's weights: an HF model of the same architecture, or its state dict.
        Tokens generated afterwards carry `version` (default: the previous version + 1).

        Tensors that already share storage with the source are skipped (free when shared). In
        shared fp32 mode the engine's tensors ARE its model's parameters, so loading a different
        source writes into that model. PEFT-wrapped models are not accepted (merge adapters first).
        """
        state = source.state_dict() if hasattr(source, "state_dict") else dict(source)
        if self.vision:  # the HF forward reads the model's own parameters
            self._load_model(state)
            self.version = self.version + 1 if version is None else int(version)
            return
        tied = self.weights.lm_head is self.weights.embed
        for name, dst in self.weights.sources():
            if name not in state:
                if name == "lm_head.weight" and tied:
                    continue
                raise KeyError(f"load_weights: source has no tensor {name!r} (is it the same architecture?)")
            src = state[name]
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"load_weights: {name} has shape {tuple(src.shape)}, engine needs {tuple(dst.shape)}")
            if src.data_ptr() != dst.data_ptr():
                dst.copy_(src)
        self.weights.repack()
        self.version = self.version + 1 if version is None else int(version)

    def _load_model(self, state) -> None:
        """A VLM's weights: every parameter of the engine's model from `state` (buffers are the model's own)."""
        own = {n: p.data for n, p in self.model.named_parameters()}
        missing = sorted(set(own) - set(state))
        if missing:
            raise KeyError(f"load_weights: source has no tensor {missing[0]!r} (is it the same architecture?)")
        for name, dst in own.items():
            src = state[name]
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"load_weights: {name} has shape {tuple(src.shape)}, engine needs {tuple(dst.shape)}")
            if src.data_ptr() != dst.data_ptr():
                dst.copy_(src)

    def close(self) -> None:
        """Drop the sampling work buffers and the stop-string tables (the weights stay with the model)."""
        self._scratch.clear()
        self._stops.clear()

    # ------------------------------------------------------------------ generation
    def interrupt(self) -> bool:
        """Cut the `generate` call in flight short (`InterruptibleEngine`): it stops after the
        current decode step; unfinished rows come back with finish reason "abort" (rows of waves
        not started yet come back empty). Returns False (and does nothing) when no call is in flight."""
        with self._lock:
            if self._running:
                self._stop.set()
            return self._running

    def generate(self, prompts, n: int, sampling: SamplingParams) -> Generation:
        """Sample `n` completions per prompt; see `covey.engine.base.Engine.generate`. Another
        thread may cut it short with `interrupt`."""
        with self._lock:
            if self._running:
                raise RuntimeError("TorchEngine.generate is already running (one call at a time per engine)")
            self._running = True
            self._stop.clear()
        try:
            return self._generate_all(prompts, n, sampling)
        finally:
            with self._lock:
                self._running = False
                self._stop.clear()

    def _generate_all(self, prompts, n: int, sampling: SamplingParams) -> Generation:
        sp = sampling
        validate_sampling(sp.temperature, sp.top_p, sp.top_k, sp.min_p, sp.max_new_tokens)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        vision = [getattr(p, "vision", None) for p in prompts]  # a VisionPrompt's image inputs
        plist = [_as_ids(p, i) for i, p in enumerate(prompts)]
        if not plist:
            raise ValueError("prompts is empty: pass at least one prompt")
        if any(v is not None for v in vision) and not self.vision:
            raise ValueError("a prompt holds images but the engine's model is a text-only LM (model.family vision_language, docs/vlm.md)")
        # a VLM's sampled image / video placeholder always ends its row (covey.models.vision.vision_stop_ids)
        stop_ids = sorted(set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(self.eos_ids)) | set(self.vision_stops))
        stops = self.stop_strings(tuple(sp.stop_strings)) if sp.stop_strings else None
        longest = max(len(p) for p in plist)
        limits = sp.prompt_max_new_tokens
        if limits is not None and len(limits) != len(plist):
            raise ValueError(f"prompt_max_new_tokens holds {len(limits)} limits for {len(plist)} prompts: give one per prompt")
        if longest + sp.max_new_tokens > self.max_positions:
            raise ValueError(
                f"longest prompt ({longest} tokens) + max_new_tokens ({sp.max_new_tokens}) exceeds "
                f"max_positions={self.max_positions}"
            )
        # All uniforms up front, one per (row, step): results do not depend on how rows are batched.
        # Drawn on the CPU whatever the device: the same seed gives the same numbers everywhere.
        gen = torch.Generator(device="cpu")
        gen.manual_seed(sp.seed if sp.seed is not None else int(torch.randint(0, 2**62, (1,), device="cpu").item()))
        uniforms = None
        if not sp.greedy:
            uniforms = _to_device(torch.rand(len(plist) * n, sp.max_new_tokens, generator=gen, device="cpu"), self.device)
        row_bytes = self._kv_row_bytes(longest + sp.max_new_tokens)
        rows = min(self.max_rows, max(1, self.max_cache_bytes // row_bytes))
        per = max(1, rows // n)  # prompts per wave: bounds the KV cache memory
        parts = []
        for a in range(0, len(plist), per):
            b = min(len(plist), a + per)
            u = None if uniforms is None else uniforms[a * n : b * n]
            lim = None if limits is None else limits[a:b]
            with torch.inference_mode():
                raw = (self._generate(plist[a:b], n, sp, stop_ids, stops, u, lim, vision[a:b]) if not self._stop.is_set()
                       else _nothing(b - a, n, sp))  # fmt: skip
            # Built outside inference mode: the learner saves these tensors for backward.
            parts.append(self._generation(plist[a:b], n, a, *raw))
            if self.vision:
                parts[-1].vision = [v for v in vision[a:b] for _ in range(n)]
        return parts[0] if len(parts) == 1 else concat_generations(parts, self.pad_token_id)

    def _kv_row_bytes(self, length: int) -> int:
        """Bytes of one row's KV cache of `length` columns (bounds the rows decoded together)."""
        if self.vision:
            from covey.engine.vision import kv_row_bytes

            return kv_row_bytes(self.model, length, self._elt)
        w = self.weights
        return 2 * len(w.layers) * w.n_kv_heads * w.head_dim * length * self._elt

    def _backend(self, rows: int, length: int, vision: list):
        """The prefill / decode backend of one wave: covey's packed forward, or the HF forward of a VLM."""
        if not self.vision:
            return _PackedDecode(self.weights, new_cache(self.weights, rows, length, self.dtype), self.prefill_rows)
        from covey.engine.vision import VisionDecode, check_window

        check_window(self.model, length)
        return VisionDecode(self.model, vision, self.dtype, self.prefill_rows)

    def regenerate(self, prompts, n: int, sampling: SamplingParams, rows: list[int]) -> Generation:
        """Rows `rows` (indices into the len(prompts) x n rows that ``generate(prompts, n, sampling)``
        returns, prompt-major) sampled again with the same uniforms under the unquantized weights
        (`RegeneratingEngine`; Sol-RL's full-precision regeneration). Needs `sampling.seed`: the
        uniforms are drawn from it as `generate` draws them. Rows come back in the order of `rows`,
        `prompt_index` naming their prompt."""
        if self.vision:
            raise ValueError("regenerate is not built for vision-language models (docs/vlm.md)")
        sp = sampling
        validate_sampling(sp.temperature, sp.top_p, sp.top_k, sp.min_p, sp.max_new_tokens)
        if sp.seed is None and not sp.greedy:
            raise ValueError("regenerate needs sampling.seed: the rows are re-drawn with the uniforms generate drew from it")
        plist = [_as_ids(p, i) for i, p in enumerate(prompts)]
        if any(not 0 <= r < len(plist) * n for r in rows):
            raise ValueError(f"rows must index the {len(plist) * n} rows of {len(plist)} prompts x {n}, got {rows}")
        if not rows:
            raise ValueError("regenerate: no rows given")
        stop_ids = sorted(set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(self.eos_ids)))
        stops = self.stop_strings(tuple(sp.stop_strings)) if sp.stop_strings else None
        uniforms = None
        if not sp.greedy:
            gen = torch.Generator(device="cpu").manual_seed(sp.seed)
            uniforms = _to_device(torch.rand(len(plist) * n, sp.max_new_tokens, generator=gen, device="cpu")[rows], self.device)
        limits = sp.prompt_max_new_tokens
        lim = None if limits is None else [limits[r // n] for r in rows]
        sel = [plist[r // n] for r in rows]
        with self._lock:
            if self._running:
                raise RuntimeError("TorchEngine.regenerate: a generate call is running (one call at a time per engine)")
            self._running = True
        saved = self.weights
        try:
            self.weights = saved.full_precision()
            with torch.inference_mode():
                raw = self._generate(sel, 1, sp, stop_ids, stops, uniforms, lim)
        finally:
            self.weights = saved
            with self._lock:
                self._running = False
        out = self._generation(sel, 1, 0, *raw)
        out.prompt_index = torch.tensor([r // n for r in rows], dtype=torch.long)
        return out

    def tree_session(self, sampling: SamplingParams) -> TreeDecoder:
        """A tree decode on this engine's weights and KV-cache layout (`ForkingEngine`)."""
        if self.vision:
            raise ValueError("tree sessions are not built for vision-language models (docs/vlm.md)")
        return TreeDecoder(self, sampling)

    @torch.inference_mode()
    def hidden_states(self, sequences: list[list[int]]) -> list[Tensor]:
        """Per sequence, [len, H] float32 CPU final hidden states (after the final norm) under the
        weights this engine holds, in its dtype (`HiddenStatesEngine`); `prefill_rows` per forward."""
        if self.vision:
            raise ValueError("hidden_states is not built for vision-language models (docs/vlm.md)")
        seqs = [_as_ids(s, i, "sequences") for i, s in enumerate(sequences)]
        if seqs and max(len(s) for s in seqs) > self.max_positions:
            raise ValueError(f"hidden_states: a sequence is longer than max_positions={self.max_positions}")
        out: list[Tensor] = []
        for a in range(0, len(seqs), self.prefill_rows):
            part = seqs[a : a + self.prefill_rows]
            width = max(len(s) for s in part)
            ids = torch.full((len(part), width), self.pad_token_id, dtype=torch.long)
            valid = torch.zeros(len(part), width, dtype=torch.bool)
            for i, s in enumerate(part):
                ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
                valid[i, width - len(s) :] = True
            h = hidden_states(self.weights, ids.to(self.device), valid.to(self.device)).float().cpu()
            out += [h[i, width - len(s) :] for i, s in enumerate(part)]
        return out

    def score(self, prompts, completions, *, temperature: float = 1.0, top_k: int = 0) -> list[tuple[Tensor, Tensor | None]]:
        """Log-probs of given completions under the weights this engine holds (`ScoringEngine`): per row,
        [L] of each completion token and [L, top_k] of the largest (None when top_k is 0), at `temperature`."""
        if self.vision:
            raise ValueError("score is not built for vision-language models (docs/vlm.md)")
        if temperature <= 0:
            raise ValueError(f"score: temperature must be > 0, got {temperature}")
        if len(prompts) != len(completions):
            raise ValueError(f"score: {len(prompts)} prompts for {len(completions)} completions")
        pairs = [(_as_ids(p, i), [int(t) for t in c]) for i, (p, c) in enumerate(zip(prompts, completions))]
        states = iter(self.hidden_states([p + c for p, c in pairs if c]))
        out: list[tuple[Tensor, Tensor | None]] = []
        for p, c in pairs:
            if not c:
                out.append((torch.zeros(0), torch.zeros(0, top_k) if top_k else None))
                continue
            h = next(states)
            with torch.inference_mode():  # the states at positions len(p)-1 .. end-1 predict c
                lp = torch.log_softmax(head_logits(self.weights, h[len(p) - 1 : -1].to(self.device)) / temperature, -1).cpu()
            top = lp.topk(min(top_k, lp.shape[-1]), -1).values.clone() if top_k else None
            out.append((lp.gather(-1, torch.tensor(c, dtype=torch.long)[:, None])[:, 0].clone(), top))
        return out

    def generate_soft(self, prompts, n: int, sampling: SamplingParams, soft, lead=None) -> tuple:
        """Soft-thinking completions (`SoftThinkingEngine`; `covey.engine.soft.soft_generate`); `lead`: an input
        vector per row after its prompt (a latent action), `soft` None: ordinary tokens."""
        from covey.engine.soft import soft_generate

        if self.vision:
            raise ValueError("soft-thinking generation is not built for vision-language models (docs/vlm.md)")
        validate_sampling(sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p, sampling.max_new_tokens)
        with self._lock:
            if self._running:
                raise RuntimeError("TorchEngine.generate_soft: a generate is already running")
            self._running = True
        try:
            return soft_generate(self, [_as_ids(p, i) for i, p in enumerate(prompts)], n, sampling, soft, lead)
        finally:
            with self._lock:
                self._running = False

    def stop_strings(self, strings: tuple[str, ...]) -> StopStrings:
        """The (cached) stop-string matcher for `strings` (needs the tokenizer)."""
        if self.tokenizer is None:
            raise ValueError("stop_strings need a tokenizer: pass tokenizer= to TorchEngine")
        if strings not in self._stops:
            self._stops[strings] = StopStrings(self.tokenizer, strings, self.vocab_size)
        return self._stops[strings]

    def _generate(self, plist: list[list[int]], n: int, sp: SamplingParams, stop_ids: list[int], stops, uniforms, limits=None,
                  vision=None):  # fmt: skip
        dev = self.device
        u, p_max, new = len(plist), max(len(p) for p in plist), sp.max_new_tokens
        rows_total = u * n
        s_len = p_max + new
        ids = torch.full((u, p_max), self.pad_token_id, dtype=torch.long, device="cpu")
        valid_p = torch.zeros(u, p_max, dtype=torch.bool, device="cpu")
        for i, p in enumerate(plist):
            ids[i, p_max - len(p) :] = torch.tensor(p, dtype=torch.long, device="cpu")
            valid_p[i, p_max - len(p) :] = True
        dense = [bool(valid_p[r0 : r0 + self.prefill_rows].all()) for r0 in range(0, u, self.prefill_rows)]  # on the host
        ids, valid_p = _to_device(ids, dev), _to_device(valid_p, dev)
        dec = self._backend(rows_total, s_len, vision or [None] * u)

        # ---- prefill each distinct prompt once, then repeat its cache rows n times
        logits = dec.prefill(ids, valid_p, dense)
        if n > 1:
            dec.repeat(n, p_max)
            logits = logits.repeat_interleave(n, dim=0)
        valid = torch.ones(rows_total, s_len, dtype=torch.bool, device=dev)
        valid[:, :p_max] = valid_p.repeat_interleave(n, dim=0)
        plen = _to_device(torch.tensor([len(p) for p in plist], dtype=torch.long, device="cpu").repeat_interleave(n), dev)

        stop_t = _to_device(torch.tensor(stop_ids, dtype=torch.long, device="cpu"), dev)
        # per-row token limit (per-prompt limits, else max_new_tokens): reaching it finishes the row ("length")
        limit = torch.tensor(limits if limits is not None else [new] * u, dtype=torch.long, device="cpu")
        limit, capped = _to_device(limit.repeat_interleave(n), dev), limits is not None and min(limits) < new
        limit_act = limit
        early = bool(stop_ids) or stops is not None or capped  # can a row finish before max_new_tokens?

        out_tok = torch.full((rows_total, new), self.pad_token_id, dtype=torch.long, device=dev)
        out_lp = torch.zeros(rows_total, new, device=dev)
        out_ent = torch.zeros(rows_total, new, device=dev) if sp.return_entropies else None
        lengths = torch.full((rows_total,), new, dtype=torch.long, device=dev)
        stopped = torch.zeros(rows_total, dtype=torch.bool, device=dev)
        aborted = torch.zeros(rows_total, dtype=torch.bool, device=dev)

        rows = torch.arange(rows_total, device=dev)  # active batch row -> output row
        alive = torch.ones(rows_total, dtype=torch.bool, device=dev)  # over the active batch
        valid_act, plen_act = valid, plen
        tok = None
        for step in range(new):
            if step > 0:
                col = p_max + step - 1  # the previous token goes to this column, at its row's position
                logits = dec.step(tok, plen_act + step - 1, col, valid_act)
            tok, lp, ent = sample_tokens(
                logits,
                temperature=sp.temperature if sp.temperature_rule is None else sp.temperature_rule(logits),
                greedy=sp.greedy,
                top_k=sp.top_k,
                top_p=sp.top_p,
                min_p=sp.min_p,
                uniforms=None if uniforms is None else uniforms[rows, step],
                with_entropy=sp.return_entropies,
                scratch=self._scratch,
            )
            out_tok[rows, step] = tok
            out_lp[rows, step] = lp
            if out_ent is not None:
                out_ent[rows, step] = ent
            done = torch.isin(tok, stop_t) & alive if stop_ids else torch.zeros_like(alive)
            if stops is not None:
                done |= stops.check(out_tok, rows, tok, alive & ~done, step)
            ended = done | (alive & (limit_act <= step + 1)) if capped else done  # per-prompt limit reached
            # Bookkeeping without a host round trip: a row's length is set once, when it finishes.
            lengths[rows] = torch.where(ended, step + 1, lengths[rows])
            stopped[rows] |= done
            alive &= ~ended
            if self._stop.is_set():  # interrupt(): unfinished rows end here, cut short ("abort")
                cut = rows[alive]
                lengths[cut] = step + 1
                aborted[cut] = True
                break
            if not early or ((step + 1) % self.sync_every and stops is None):
                continue
            finished = int((~alive).sum())  # the host synchronisation
            if finished == alive.numel():
                break
            if self.compaction and finished and finished >= self.compact_fraction * alive.numel():
                keep = alive.nonzero().squeeze(1)
                dec.keep(keep, p_max + step)  # columns written so far
                valid_act, plen_act, rows, tok = valid_act[keep], plen_act[keep], rows[keep], tok[keep]
                limit_act = limit_act[keep]
                alive = alive[keep]
        return _to_host(out_tok, out_lp, out_ent, lengths, stopped, aborted)

    def _generation(self, plist, n, first_id, out_tok, out_lp, out_ent, lengths, stopped, aborted) -> Generation:
        """The CPU-side record (all inputs are CPU tensors)."""
        t = int(lengths.max()) if len(lengths) else 0
        mask = (torch.arange(t, device="cpu")[None] < lengths[:, None]).float()  # [N, T]
        return Generation(
            prompt_ids=[torch.tensor(p, dtype=torch.long, device="cpu") for p in plist for _ in range(n)],
            completion_ids=out_tok[:, :t].masked_fill(mask == 0, self.pad_token_id),
            completion_mask=mask,
            logprobs=out_lp[:, :t].masked_fill(mask == 0, 0.0),
            finish_reason=["abort" if a else "stop" if s else "length" for s, a in zip(stopped.tolist(), aborted.tolist())],
            prompt_index=torch.arange(first_id, first_id + len(plist), device="cpu").repeat_interleave(n),
            entropies=None if out_ent is None else out_ent[:, :t].masked_fill(mask == 0, 0.0),
            policy_version=version_tensor(mask, self.version),
        )


class _PackedDecode:
    """One wave's prefill and decode steps through covey's hand-written forward and KV cache
    (`covey.engine.forward`); `covey.engine.vision.VisionDecode` is the same for a VLM."""

    def __init__(self, w, kv, prefill_rows: int):
        self.w, self.kv, self.act, self.prefill_rows = w, kv, kv, prefill_rows

    def prefill(self, ids: Tensor, valid: Tensor, dense: list[bool]) -> Tensor:
        """Logits [U, V] after each left-padded prompt (its cache rows are filled), `prefill_rows` at a time."""
        u = ids.shape[0]
        logits = torch.empty(u, self.w.embed.shape[0], device=ids.device)
        for c, r0 in enumerate(range(0, u, self.prefill_rows)):
            r1 = min(u, r0 + self.prefill_rows)
            logits[r0:r1] = prefill(self.w, ids[r0:r1], valid[r0:r1], self.kv.rows(r0, r1), dense[c])
        return logits

    def repeat(self, n: int, used: int) -> None:
        u = self.kv.batch // n
        self.act = self.kv.gather_rows(torch.arange(u, device=self.kv.k.device).repeat_interleave(n), used)

    def step(self, tok: Tensor, pos: Tensor, col: int, valid: Tensor) -> Tensor:
        return decode_step(self.w, tok, pos, self.act, col, valid)

    def keep(self, index: Tensor, used: int) -> None:
        self.act = self.act.gather_rows(index, used)


def _nothing(prompts: int, n: int, sp: SamplingParams):
    """What `_generate` returns for a wave an interrupt skipped: empty rows, cut short."""
    rows = prompts * n
    empty = torch.zeros(rows, 0)
    return (empty.long(), empty, empty if sp.return_entropies else None, torch.zeros(rows, dtype=torch.long), torch.zeros(rows, dtype=torch.bool),
            torch.ones(rows, dtype=torch.bool))  # fmt: skip


def _to_device(t: Tensor, device: torch.device) -> Tensor:
    """A host tensor on `device`; to CUDA through pinned memory without waiting (a copy from pageable
    memory is a host synchronisation). The pinned block is not reused before the copy is done."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _to_host(*tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """The tensors on the CPU after one wait for the device (each `.cpu()` would wait on its own)."""
    dev = next((t.device for t in tensors if t is not None), torch.device("cpu"))
    if dev.type != "cuda":
        return tuple(None if t is None else t.cpu() for t in tensors)
    out = tuple(None if t is None else t.to("cpu", non_blocking=True) for t in tensors)  # into pinned memory
    torch.cuda.current_stream(dev).synchronize()
    return out


def _shares(w, model) -> bool:
    own = {p.data_ptr() for p in model.parameters()}
    return all(t.data_ptr() in own for _, t in w.sources())


def _as_ids(p, i: int, what: str = "prompts") -> list[int]:
    if isinstance(p, Tensor):
        if p.dim() != 1:
            raise ValueError(f"{what}[{i}] must be a 1-D tensor of token ids, got shape {tuple(p.shape)}")
        p = p.tolist()
    p = [int(x) for x in p]
    if not p:
        raise ValueError(f"{what}[{i}] is empty: it needs at least one token")
    return p


def _eos_ids(model, tokenizer) -> list[int]:
    ids = set()
    gc = getattr(model, "generation_config", None)
    eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    ids.update([eos] if isinstance(eos, int) else list(eos or []))
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)
