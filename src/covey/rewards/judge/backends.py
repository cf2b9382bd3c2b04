"""Judge backends: where a judge's prompts are answered. ``complete(requests) -> replies``, one batched call.

    local   any HF causal LM that `covey.models.load` accepts (an alias such as tiny-llama, a folder, a
            cached hub id), answered by covey's own `TorchEngine` (batched greedy decoding, or sampling
            at temperature > 0); ``choices`` requests are scored from the next-token log-probs of one
            forward instead (no decoding). Loaded lazily, once per process, and shared by every judge
            of that process that names the same (model, dtype, device, seed).
    openai  ``POST {base_url}/chat/completions`` of an OpenAI-compatible server (vLLM, SGLang,
            llama.cpp, a hosted API), with the standard library's urllib (`_http.post`): a pool of
            `concurrency` requests, each attempt within `timeout_s` in total (connect, headers and body: a
            server that trickles bytes times out) and refused past `max_reply_bytes`; `retries` retries
            with exponential backoff (``backoff_s`` x 2^i, capped at 8 s) on connection errors, timeouts,
            HTTP 408 / 429 / 5xx and undecodable bodies; other 4xx replies, oversized bodies and redirects
            are not retried. A redirect is never followed (the key would go to another host, and that
            host's reply would be the verdict). There is no default host: `base_url` (or the variable
            named by `base_url_env`) must be given, and the key is read from the variable named by
            `api_key_env` (never stored in the run's config.yaml).

    policy  the live policy as its own referee (URPO, arXiv 2507.17515): the trainer's own engine, greedy
            (or sampled) through the same `generate` call as rollouts. The trainer hands the engine,
            tokenizer and policy version to the reward runner before each scoring
            (`RewardRunner.set_context`); a reward holding this backend declares ``needs_engine`` and runs
            in the trainer's process. The cache key carries the policy version, so a reply is reused only
            within one version of the weights.

A reply with `error` set failed (after the retries); the judge's `on_fail` decides the score.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path

from covey.rewards.judge import _http

__all__ = ["JudgeReply", "JudgeRequest", "LocalBackend", "OpenAIBackend", "PolicyBackend", "build_backend"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeRequest:
    messages: tuple[tuple[str, str], ...]  # (role, content) pairs: hashable and picklable
    max_new_tokens: int = 4
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    seed: int = 0

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class JudgeReply:
    text: str | None = None
    choice_logprobs: dict[str, float] | None = None
    error: str | None = None
    http_errors: int = 0  # failed attempts (openai), counted in the judge's metrics
    extra: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------- local
_LOADED: dict[tuple, tuple] = {}  # (model, dtype, device, seed) -> (model, tokenizer, engine), per process
_LOAD_LOCK = threading.Lock()


def _fingerprint_folder(folder: Path) -> str:
    """config.json's bytes + the names, sizes and mtimes of the weight files (no full read of the weights)."""
    h = hashlib.sha256((folder / "config.json").read_bytes() if (folder / "config.json").is_file() else b"")
    for p in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


class LocalBackend:
    """A local HF causal LM through `TorchEngine`. dtype: fp32 / bf16 (weights and engine);
    device: cpu / cuda / auto; seed: weight seed of the tiny random models."""

    kind = "local"

    def __init__(self, model: str, dtype: str = "fp32", device: str = "auto", seed: int = 0):
        from covey.models.loading import ALIASES, check_name

        if not isinstance(model, str) or not model:
            raise ValueError("judge backend local: `model` must name a model (an alias, a folder or a hub id)")
        if dtype not in ("fp32", "bf16", "float32", "bfloat16"):
            raise ValueError(f"judge backend local: dtype must be fp32 or bf16, got {dtype!r}")
        if device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"judge backend local: device must be cpu, cuda or auto, got {device!r}")
        try:
            check_name(model)  # fails now (config time) on an unknown name, without loading anything
        except (FileNotFoundError, ValueError) as e:
            raise ValueError(f"judge backend local: {e}") from None
        self.model_name, self.dtype, self.device, self.seed = model, dtype, device, int(seed)
        folder = Path(model).expanduser()
        if model in ("tiny-llama", "tiny-qwen2"):
            weights = f"{model}:random-init-seed-{self.seed}"
        elif folder.is_dir():
            weights = _fingerprint_folder(folder)
        else:
            weights = f"{model}:{'alias' if model in ALIASES else 'hub'}"
        # the verdict also depends on the precision and the device the weights run at (the cache key reads this)
        self.fingerprint = f"{weights}|{'bf16' if dtype in ('bf16', 'bfloat16') else 'fp32'}|{self._device()}"

    def _device(self) -> str:
        import torch

        return ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device

    def _loaded(self):
        import torch

        from covey.engine.torch_engine import TorchEngine
        from covey.models.loading import load

        device = self._device()
        key = (self.model_name, self.dtype, device, self.seed)
        with _LOAD_LOCK:
            if key not in _LOADED:
                dt = "bf16" if self.dtype in ("bf16", "bfloat16") else "float32"
                model, tok = load(self.model_name, dtype=dt, seed=self.seed)
                model = model.to(device).eval()
                engine = TorchEngine(model, tok, dtype="bf16" if dt == "bf16" else "fp32")
                _LOADED[key] = (model, tok, engine)
            return _LOADED[key]

    def complete(self, requests: list[JudgeRequest]) -> list[JudgeReply]:
        if not requests:
            return []
        model, tok, engine = self._loaded()
        return engine_complete(engine, tok, requests, choice_model=model)

    @staticmethod
    def _choice_logprobs(model, tok, prompts: list[list[int]], choices: list[tuple[str, ...]], batch: int = 16):
        """Log-prob of each choice's first token right after each prompt (one forward per batch of prompts)."""
        import torch

        device = next(model.parameters()).device
        out = []
        for a in range(0, len(prompts), batch):
            part = prompts[a:a + batch]
            width = max(len(p) for p in part)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            ids = torch.tensor([p + [pad] * (width - len(p)) for p in part], device=device)
            mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in part], device=device)
            with torch.inference_mode():
                logits = model(input_ids=ids, attention_mask=mask).logits
            last = logits[torch.arange(len(part), device=device), torch.tensor([len(p) - 1 for p in part], device=device)]
            logp = torch.log_softmax(last.float(), dim=-1)
            for row, opts in enumerate(choices[a:a + batch]):
                out.append({c: float(logp[row, tok.encode(c, add_special_tokens=False)[0]]) for c in opts})
        return out


def _prompt_ids(tok, req: JudgeRequest) -> list[int]:
    from covey.models.chat import apply_chat

    if getattr(tok, "chat_template", None):
        return apply_chat(tok, req.message_dicts())
    return list(tok.encode("\n\n".join(c for _, c in req.messages)))


def engine_complete(engine, tok, requests: list[JudgeRequest], choice_model=None) -> list[JudgeReply]:
    """Answer judge requests with a covey engine: one `generate` call per distinct decoding setting
    (greedy at temperature 0); ``choices`` requests are scored by one forward of `choice_model`."""
    from covey.engine.base import SamplingParams

    replies: list[JudgeReply | None] = [None] * len(requests)
    ids = [_prompt_ids(tok, r) for r in requests]
    limit = getattr(engine, "max_positions", None)
    todo: dict[tuple, list[int]] = {}  # decoding settings -> request indices (one engine call each)
    scored: list[int] = []
    for i, r in enumerate(requests):
        room = None if limit is None else limit - (1 if r.choices else r.max_new_tokens)
        if room is not None and len(ids[i]) > room:
            replies[i] = JudgeReply(error=f"judge prompt has {len(ids[i])} tokens; the judge model takes at most {room} "
                                          "(with max_new_tokens)")
        elif r.choices:
            if choice_model is None:
                replies[i] = JudgeReply(error="this backend cannot score choices (no model to run a forward on)")
            else:
                scored.append(i)
        else:
            todo.setdefault((r.max_new_tokens, r.temperature, r.top_p, r.stop, r.seed), []).append(i)
    for (max_new, temp, top_p, stop, seed), idx in todo.items():
        sp = SamplingParams(temperature=temp if temp > 0 else 1.0, top_p=top_p, max_new_tokens=max_new,
                            greedy=temp <= 0, seed=seed, stop_strings=stop)
        gen = engine.generate([ids[i] for i in idx], 1, sp)
        for row, i in enumerate(idx):
            n = int(gen.lengths[row])
            replies[i] = JudgeReply(text=tok.decode(gen.completion_ids[row, :n].tolist(), skip_special_tokens=True))
    if scored:
        for i, lp in zip(scored, LocalBackend._choice_logprobs(choice_model, tok, [ids[i] for i in scored],
                                                              [requests[i].choices for i in scored])):
            replies[i] = JudgeReply(choice_logprobs=lp)
    return replies  # type: ignore[return-value]


class PolicyBackend:
    """The live policy judges (URPO): the trainer's engine, handed over by `set_context` before each
    scoring. Fingerprint ``policy@v<version>``: the cache never serves a reply across weight versions."""

    kind = "policy"

    def __init__(self):
        self.engine = self.tokenizer = None
        self.policy_version: int | None = None

    def set_context(self, *, engine, tokenizer, policy_version: int | None = None, **_) -> None:
        self.engine, self.tokenizer, self.policy_version = engine, tokenizer, policy_version

    @property
    def fingerprint(self) -> str:
        version = self.policy_version if self.policy_version is not None else getattr(self.engine, "version", None)
        return f"policy@v{version}"

    def complete(self, requests: list[JudgeRequest]) -> list[JudgeReply]:
        if self.engine is None:
            raise RuntimeError("judge backend policy: no engine; the trainer hands its engine to the reward runner "
                               "(RewardRunner.set_context(engine=..., tokenizer=..., policy_version=...)) before scoring")
        return engine_complete(self.engine, self.tokenizer, requests) if requests else []


# ----------------------------------------------------------------------------------------------- openai
class OpenAIBackend:
    """An OpenAI-compatible chat-completions endpoint (see the module docstring)."""

    kind = "openai"

    def __init__(self, model: str, base_url: str | None = None, base_url_env: str = "OPENAI_BASE_URL",
                 api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8, timeout_s: float = 60.0, retries: int = 3,
                 backoff_s: float = 0.5, extra_body: dict | None = None, max_reply_bytes: int = 8 * 2**20):
        base_url = base_url or os.environ.get(base_url_env or "", "")
        if not base_url:
            raise ValueError(f"judge backend openai: no base_url; give backend.base_url (e.g. http://127.0.0.1:8000/v1) "
                             f"or set ${base_url_env}. There is no default host")  # fmt: skip
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"judge backend openai: base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError("judge backend openai: `model` (the served model's name) is required")
        if concurrency < 1 or retries < 0 or not timeout_s > 0 or backoff_s < 0 or max_reply_bytes < 1024:
            raise ValueError("judge backend openai: concurrency >= 1, retries >= 0, timeout_s > 0, backoff_s >= 0 and "
                             "max_reply_bytes >= 1024 needed")
        self.base_url, self.model = base_url.rstrip("/"), model
        self.api_key_env, self.concurrency, self.timeout_s = api_key_env, int(concurrency), float(timeout_s)
        self.retries, self.backoff_s, self.extra_body = int(retries), float(backoff_s), dict(extra_body or {})
        self.max_reply_bytes = int(max_reply_bytes)
        # extra_body (e.g. a reasoning effort, a guided-decoding schema) changes the verdict: it keys the cache
        self.fingerprint = f"{self.base_url}|{self.model}|{json.dumps(self.extra_body, sort_keys=True, default=str)}"

    def complete(self, requests: list[JudgeRequest]) -> list[JudgeReply]:
        if not requests:
            return []
        if len(requests) == 1:
            return [self._one(requests[0])]
        with concurrent.futures.ThreadPoolExecutor(min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))  # results in request order

    def _one(self, req: JudgeRequest) -> JudgeReply:
        if req.choices:
            return JudgeReply(error="the openai backend cannot score choices from log-probs; use the local backend")
        body = {"model": self.model, "messages": req.message_dicts(), "max_tokens": req.max_new_tokens,
                "temperature": req.temperature, "top_p": req.top_p, "seed": req.seed, **self.extra_body}
        if req.stop:
            body["stop"] = list(req.stop)
        key = os.environ.get(self.api_key_env or "", "")
        secret = {"Authorization": f"Bearer {key}"} if key else {}
        data = json.dumps(body).encode()
        failures, last = 0, ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(8.0, self.backoff_s * 2 ** (attempt - 1)))
            try:
                raw = _http.post(f"{self.base_url}/chat/completions", data, {"Content-Type": "application/json"},
                                 secret_headers=secret, deadline_s=self.timeout_s, max_bytes=self.max_reply_bytes)
                payload = json.loads(raw.decode())
                text = payload["choices"][0]["message"]["content"]
                if not isinstance(text, str):
                    raise TypeError(f"message content is {type(text).__name__}")
                return JudgeReply(text=text, http_errors=failures)
            except urllib.error.HTTPError as e:
                failures, last = failures + 1, f"HTTP {e.code} from {self.base_url}"
                if 400 <= e.code < 500 and e.code not in (408, 429):
                    break  # the request itself is wrong: asking again cannot help
            except (_http.RedirectRefused, _http.BodyTooLarge) as e:
                failures, last = failures + 1, f"{type(e).__name__}: {e}"
                break  # the server answers this way by design: asking again cannot help
            except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError) as e:  # timeouts, refused,
                failures, last = failures + 1, f"{type(e).__name__}: {e}"  # bad JSON (or nested past the limit)
        return JudgeReply(error=last, http_errors=failures)


BACKENDS = {"local": LocalBackend, "openai": OpenAIBackend, "policy": PolicyBackend}


def build_backend(spec):
    """A backend from ``{kind: local|openai|policy, ...its parameters}`` (or an object with `complete`, for tests / the API)."""
    if hasattr(spec, "complete"):
        if not hasattr(spec, "fingerprint"):
            raise ValueError("judge: a backend object needs a `fingerprint` attribute (it keys the cache)")
        return spec
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError("judge: backend must be {kind: local | openai | policy, ...}")
    params = dict(spec)
    kind = params.pop("kind")
    if kind not in BACKENDS:
        raise ValueError(f"judge: unknown backend kind {kind!r}; choose from {', '.join(BACKENDS)}")
    try:
        return BACKENDS[kind](**params)
    except TypeError as e:
        raise ValueError(f"judge backend {kind}: {e}") from None


