"""The Engine seam: token ids in, sampled token ids and their log-probs out.

The engine knows nothing about chat templates, datasets, groups or rewards; it speaks tokens and
tensors. Everything a rollout strategy may ask of an engine is a named protocol here, so an engine
in another process (a Ray actor, vLLM) either provides a protocol or is refused by name when the
config is read (`missing_protocols`), never at the first tree step:

    Engine              every engine: generate(prompts, n, sampling) -> Generation,
                        load_weights(source, version), close(); facts pad_token_id, version
    ForkingEngine       + tree_session(sampling) -> TreeSession: rows that continue, fork (copy a
                        row's prefix state instead of recomputing it) and stop independently
                        (treepo, branch, latr, april, arrol, tppo)
    HiddenStatesEngine  + hidden_states(sequences) -> per sequence [L, H] final hidden states of the
                        weights the engine holds (arrol's quality head, tppo's value head)
    SoftThinkingEngine  + generate_soft(prompts, n, sampling, soft) -> soft-thinking rollouts: mixtures of
                        top-k embeddings with Gumbel noise in the thinking span (soft_thinking, SofT-GRPO)
    ScoringEngine       + score(prompts, completions, temperature, top_k) -> per row the log-probs of
                        given completion tokens (and the top-k log-probs at each position) under the
                        weights the engine holds (hill's hint reliance, scope_ttrl's confidences)
    InterruptibleEngine + interrupt() -> bool: thread-safe; the `generate` call in flight stops at its
                        next token and returns what it has (rows cut short: finish reason "abort");
                        `covey.engine.carry.continue_generation` continues them as prompt + partial
                        under the weights loaded since (the async executor's weight updates)

Engines are built as ``factory(model, tokenizer, **params)`` from config ``engine: {name, ...}``
(registered in `ENGINES`, or an import path). The check works on the factory's class (or its
return annotation) without building it: a method must be defined on the class, a fact (a data
member) must be a class attribute, a property or a class-level annotation (``pad_token_id: int``).
A rollout strategy declares what it needs as ``engine_protocols = (ForkingEngine,)``
(`covey.strategies.base.check_engine_protocols`). The strategy turns a `Generation` (or finished
`Row`s) into a `Rollouts` batch (it alone assigns groups and prompt ids).

A new capability is added the same way: a protocol here, an entry in `ENGINE_PROTOCOLS`, and the
strategies (or executors) that need it declare it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from covey.registry import Caps, Registry

__all__ = [
    "EngineCaps",
    "ENGINES",
    "ENGINE_PROTOCOLS",
    "Engine",
    "ForkingEngine",
    "Generation",
    "HiddenStatesEngine",
    "InterruptibleEngine",
    "RegeneratingEngine",
    "Row",
    "SamplingParams",
    "ScoringEngine",
    "SoftThinkingEngine",
    "TemperatureRuleEngine",
    "TreeSession",
    "concat_generations",
    "engine_class",
    "missing_protocols",
    "protocol_members",
    "register_engine",
]


@dataclass
class SamplingParams:
    """How to sample. `top_k=0`, `top_p=1.0`, `min_p=0.0` disable those filters.

    Empty `stop_token_ids` means the tokenizer's / model's EOS ids (unless `ignore_eos`).

    Per-prompt length limits (a row that reaches its limit finishes with reason "length", exactly
    like one that reaches `max_new_tokens`; rows of other prompts are unaffected):
    prompt_max_new_tokens: one limit per prompt of this `generate` call, in order, each in
                           [1, max_new_tokens]; None = `max_new_tokens` for all. `sample_groups`
                           fills it from the sampler's `Draw.max_new_tokens`.
    temperature_rule:      None, or `rule(logits [B, V]) -> temperatures [B]` called at every decode
                           step (HAPO's entropy-adaptive temperature); the returned log-probs are those
                           of the distribution actually sampled from. Only engines with the
                           `TemperatureRuleEngine` protocol apply it.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    greedy: bool = False  # argmax decoding; logprobs are still those of the tempered distribution
    ignore_eos: bool = False  # no default stop tokens (benchmarks); explicit stop_token_ids still stop
    return_entropies: bool = False  # fill Generation.entropies (entropy of the tempered distribution)
    prompt_max_new_tokens: tuple[int, ...] | None = None
    temperature_rule: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.prompt_max_new_tokens is not None:
            self.prompt_max_new_tokens = tuple(self.prompt_max_new_tokens)
            bad = [(i, v) for i, v in enumerate(self.prompt_max_new_tokens)
                   if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= self.max_new_tokens]  # fmt: skip
            if bad:
                i, v = bad[0]
                raise ValueError(f"prompt_max_new_tokens[{i}] = {v!r}: each per-prompt limit must be an int in "
                                 f"[1, max_new_tokens={self.max_new_tokens}]")  # fmt: skip


@dataclass
class Generation:
    """What an engine returns for P prompts x n completions: N = P * n rows, prompt p's rows at
    [p*n, (p+1)*n).

    prompt_ids:     list of N 1-D long tensors (the prompt of each row).
    completion_ids: [N, T] long, right-padded with the pad id.
    completion_mask:[N, T] float32, 1.0 on generated tokens.
    logprobs:       [N, T] float32, log-prob of each sampled token under the (tempered) sampling
                    distribution of the weights that produced it; 0 on padding.
    finish_reason:  N strings, "stop" or "length"; "abort" for a row cut short by
                    `InterruptibleEngine.interrupt` (its tokens so far are kept).
    prompt_index:   [N] long, which of the P prompts each row continues.
    entropies:      [N, T] float32 or None (when `SamplingParams.return_entropies`).
    policy_version: [N, T] long or None, the weights version that produced each token.
    vision:         N `covey.models.vision.VisionInputs` or None (a vision-language policy: the image
                    inputs of each row's prompt, shared by its n rows), or None for a text-only call.
    """

    prompt_ids: list[Tensor]
    completion_ids: Tensor
    completion_mask: Tensor
    logprobs: Tensor
    finish_reason: list[str]
    prompt_index: Tensor
    entropies: Tensor | None = None
    policy_version: Tensor | None = None
    vision: list | None = None

    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    @property
    def lengths(self) -> Tensor:
        """[N] long: generated tokens per row."""
        return self.completion_mask.sum(-1).round().long()


def concat_generations(parts: list[Generation], pad_id: int, prompt_offsets: list[int] | None = None) -> Generation:
    """Join generations row-wise, right-padding token tensors to the widest T (`pad_id` for ids, 0
    otherwise). `prompt_offsets[j]`: added to part j's `prompt_index` (parts over different prompts,
    e.g. the Ray executor's workers); None when every part indexes the same prompt list (waves)."""
    t = max(g.completion_ids.shape[1] for g in parts)
    offsets = prompt_offsets or [0] * len(parts)

    def cat(name, value=0):
        vals = [getattr(g, name) for g in parts]
        if vals[0] is None:
            return None
        return torch.cat([torch.nn.functional.pad(v, (0, t - v.shape[1]), value=value) for v in vals])

    return Generation(
        prompt_ids=[x for g in parts for x in g.prompt_ids],
        completion_ids=cat("completion_ids", pad_id),
        completion_mask=cat("completion_mask"),
        logprobs=cat("logprobs"),
        finish_reason=[r for g in parts for r in g.finish_reason],
        prompt_index=torch.cat([g.prompt_index + o for g, o in zip(parts, offsets)]),
        entropies=cat("entropies"),
        policy_version=cat("policy_version"),
        vision=None if all(g.vision is None for g in parts) else [v for g in parts for v in (g.vision or [None] * len(g))],
    )


@dataclass
class Row:
    """One sequence of a `TreeSession`: `prompt` ids, completion `tokens` so far with their
    log-probs, entropies and policy versions, and an opaque `payload` owned by the caller (a tree
    path, a group index)."""

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    payload: Any = None
    finish_reason: str | None = None  # "stop" / "length" once finished

    def copy(self, payload: Any = None) -> "Row":
        return replace(self, tokens=list(self.tokens), logprobs=list(self.logprobs), entropies=list(self.entropies),
                       versions=list(self.versions), payload=self.payload if payload is None else payload)  # fmt: skip


@runtime_checkable
class Engine(Protocol):
    """What every engine provides (the `group`, `dynamic`, `dars`, `igrpo` and `cog_rethinker`
    strategies need nothing more)."""

    pad_token_id: int
    """The id that right-pads `Generation.completion_ids` (and the batches strategies build)."""
    version: int
    """The policy version of the weights loaded now (the last `load_weights` version; 0 at start)."""

    def generate(self, prompts: list[list[int]] | list[Tensor], n: int, sampling: SamplingParams) -> Generation:
        """Sample `n` completions for each prompt (rows of prompt p at [p*n, (p+1)*n))."""
        ...

    def load_weights(self, source: Any, version: int | None = None) -> None:
        """Use the learner's weights (an HF model or a name -> tensor mapping); tokens generated
        afterwards carry `version` in `Generation.policy_version`."""
        ...

    def close(self) -> None:
        """Release what the engine holds (caches, workers, device memory)."""
        ...


@runtime_checkable
class TreeSession(Protocol):
    """An open tree / fork decode over the engine's weights: a batch of `rows` that continue, fork
    and stop independently (the torch engine's is `covey.engine.tree.TreeDecoder`).

    Sampling follows the session's `SamplingParams` (tempered full-distribution log-probs; a
    seeded session is reproducible); each row's completion is capped at `max_new_tokens`.
    """

    rows: list[Row]
    """The running rows, in order (finished rows leave; `decode`/`step` return them)."""
    logits: Tensor | None
    """[len(rows), V] next-token logits of each running row (latr branches on them)."""
    stop_ids: Tensor
    """1-D long: the token ids that finish a row (EOS unless ignore_eos, plus `stop_token_ids`)."""
    decoded: int
    """Tokens sampled or forced so far (a metric: the tree's decode cost)."""
    prefilled: int
    """Prompt + prefix tokens prefilled by `add` so far."""

    def __len__(self) -> int:
        """Running rows."""
        ...

    def add(self, rows: list[Row]) -> None:
        """Append rows that start from prompt + their `tokens` so far (a prefill)."""
        ...

    def fork(self, index: list[int], payloads: list[Any] | None = None) -> None:
        """Keep running rows `index` (any order; a repeat forks a row with its prefix state);
        `payloads` replace the kept rows' payloads."""
        ...

    def step(self, tokens: Tensor | None = None) -> list[Row]:
        """One token per row, sampled, or `tokens` [R] forced (their log-probs recorded); returns
        (and removes) the rows that finished (stop token, stop string, max_new_tokens)."""
        ...

    def decode(self, steps: int) -> list[Row]:
        """Up to `steps` sampled tokens per row; returns (and removes) the rows that finished."""
        ...

    def take(self) -> list[Row]:
        """Remove and return every running row (unfinished rows a strategy carries)."""
        ...


@runtime_checkable
class ForkingEngine(Engine, Protocol):
    """An engine that decodes trees: rows fork without recomputing their shared prefix."""

    def tree_session(self, sampling: SamplingParams) -> TreeSession:
        """Open a tree decode (empty: `add` the prompts) sampling with `sampling`."""
        ...


@runtime_checkable
class HiddenStatesEngine(Engine, Protocol):
    """An engine that exposes the policy's hidden states (features for heads trained on the fly)."""

    def hidden_states(self, sequences: list[list[int]]) -> list[Tensor]:
        """Per token sequence, [len, H] float32 on the CPU: the final (normed) hidden state at each
        position, under the weights the engine holds now (the `version` it generates with)."""
        ...


@runtime_checkable
class ScoringEngine(Engine, Protocol):
    """An engine that scores given completions (teacher forcing, no sampling)."""

    def score(self, prompts: list[list[int]], completions: list[list[int]], *, temperature: float = 1.0,
              top_k: int = 0) -> list[tuple[Tensor, Tensor | None]]:  # fmt: skip
        """Per row (prompt i + completion i), ([L_i] float32 log-prob of each completion token, [L_i, k]
        float32 the k largest log-probs at that position or None when top_k = 0), all under the
        distribution at `temperature` of the weights the engine holds now; on the CPU."""
        ...


@runtime_checkable
class SoftThinkingEngine(Engine, Protocol):
    """An engine that generates soft tokens (mixtures of top-k embeddings) in a thinking span."""

    def generate_soft(self, prompts: list[list[int]], n: int, sampling: SamplingParams, soft: Any, lead: Tensor | None = None) -> tuple:
        """`n` completions per prompt: (Generation with the top-1 id of each position, per row [L, k] long
        candidate ids, per row [L, k] float32 scores); `soft` is a `covey.engine.soft.SoftParams` (None:
        ordinary tokens); `lead` [rows, H]: an input vector per row after its prompt (a latent action)."""
        ...


@runtime_checkable
class RegeneratingEngine(Engine, Protocol):
    """An engine that can sample chosen rows of a `generate` call again, with the same randomness, on its
    unquantized weights (Sol-RL: explore in low precision, train on full-precision regenerations)."""

    low_precision: bool
    """Whether `generate` samples through quantized weights (False: `regenerate` repeats `generate`)."""

    def regenerate(self, prompts: list[list[int]], n: int, sampling: SamplingParams, rows: list[int]) -> Generation:
        """Rows `rows` (indices into the len(prompts) x n rows of ``generate(prompts, n, sampling)``)
        sampled again with the same uniforms (`sampling.seed` required) under full precision."""
        ...


@runtime_checkable
class TemperatureRuleEngine(Engine, Protocol):
    """An engine that applies `SamplingParams.temperature_rule` (a per-token temperature) in `generate`."""

    temperature_rules: bool


class InterruptibleEngine(Engine, Protocol):
    """An engine whose `generate` can be cut short from another thread (a weight update of the async
    executor): the rows in flight come back with their tokens, log-probs and policy versions so far
    and continue later from prompt + partial (`covey.engine.carry.continue_generation`)."""

    def interrupt(self) -> bool:
        """Thread-safe. Ask the `generate` call in flight to stop after the token it is sampling: it
        returns at once with every unfinished row cut where it stands (finish reason "abort"; rows
        not started yet come back empty, also "abort"). True when a call was in flight, False when
        none was (then nothing happens: a later call is not affected)."""
        ...


ENGINE_PROTOCOLS: dict[type, str] = {
    Engine: "generate, load_weights, close",
    ForkingEngine: "tree forking",
    HiddenStatesEngine: "the policy's hidden states",
    ScoringEngine: "scoring given completions",
    SoftThinkingEngine: "soft-thinking generation (mixtures of token embeddings)",
    RegeneratingEngine: "full-precision regeneration of chosen rows",
    TemperatureRuleEngine: "per-token temperature rules",
    InterruptibleEngine: "interruptible generation",
}
"""Each engine protocol a strategy may declare, with the words that name it in errors."""


def protocol_members(protocol: type) -> dict[str, bool]:
    """The public members of an engine protocol (with its bases): name -> True for a method, False
    for a fact (a data member)."""
    out: dict[str, bool] = {}
    for base in reversed(protocol.__mro__):
        if base in (Protocol, typing.Generic, object) or not getattr(base, "_is_protocol", False):
            continue
        for name in getattr(base, "__annotations__", {}):
            out[name] = False
        for name, value in vars(base).items():
            if callable(value) and not name.startswith("_"):
                out[name] = True
    return out


def engine_class(factory: Any) -> type | None:
    """The class an engine factory builds: the factory itself when it is a class, else its return
    annotation when that is a class; None when that cannot be known without building it."""
    if inspect.isclass(factory):
        return factory
    try:
        ret = typing.get_type_hints(factory).get("return")
    except Exception:  # forward references the factory's module cannot resolve
        return None
    return ret if inspect.isclass(ret) else None


def _has(cls: type, name: str, method: bool) -> bool:
    if method:
        return callable(getattr(cls, name, None))
    return hasattr(cls, name) or any(name in vars(k).get("__annotations__", {}) for k in cls.__mro__)


def missing_protocols(factory: Any, protocols: tuple[type, ...]) -> dict[type, list[str]]:
    """{protocol: the members the engine lacks} for each of `protocols` that an engine built by
    `factory` (a class, or a function whose return annotation is one) does not provide; checked on
    the class, nothing is built. A factory whose class is unknown passes `Engine` (`ENGINES.build`
    checks the built object) and provides no other protocol (its members are listed as ["?"])."""
    cls = engine_class(factory)
    out: dict[type, list[str]] = {}
    for proto in protocols:
        if cls is None:
            lack = [] if proto is Engine else ["?"]
        else:
            lack = [m for m, is_method in protocol_members(proto).items() if not _has(cls, m, is_method)]
        if lack:
            out[proto] = lack
    return out


def version_tensor(mask: Tensor, version: int) -> Tensor:
    """[N, T] long policy versions for the generated tokens (0 on padding)."""
    return (mask > 0).long() * int(version)


class EngineCaps(Caps):
    """What an engine class declares beyond its protocols (its `caps`; defaults: a causal engine for
    every model, nothing to check). Checks run when the config is read, before a model loads.

    family:         the model family it generates with ("causal", "masked_diffusion"; `covey.family`).
    takes_images:   it generates from prompts with images (`covey.models.vision.VisionPrompt`): a
                    vision-language policy (model.family vision_language, docs/vlm.md) needs it.
    model_types:    the config.json ``model_type`` values it implements (None: any; `covey.engine.support`).
    check_config:   check_config(params, sampling, needs, device) raising ValueError for a run it cannot
                    serve (`needs`: the optional `Rollouts` fields the run reads, e.g. "entropies").
    check_lora:     check_lora(params, model.lora, runtime.executor, device) raising ValueError.
    syncs_adapter:  syncs_adapter(params, model.lora, runtime.executor, device) -> bool: the engine is
                    built from the PEFT model and each weight sync passes only the adapter.
    """

    family: str = "causal"
    takes_images: bool = False
    model_types: tuple[str, ...] | None = None
    check_config: Callable[..., None] | None = None
    check_lora: Callable[..., None] | None = None
    syncs_adapter: Callable[..., bool] | None = None


ENGINES = Registry("engine", protocol=Engine, context=("model", "tokenizer"), caps=EngineCaps)
register_engine = ENGINES.register
