"""covey.engine: generation only (token ids in, sampled ids + behaviour log-probs out).

The seam is a set of named protocols (`covey.engine.base`): `Engine` (generate, load_weights,
close, pad_token_id, version), `ForkingEngine` (tree_session -> a `TreeSession` of `Row`s that
fork and stop independently), `HiddenStatesEngine` (hidden_states), `ScoringEngine` (score: log-probs of
given completions), `SoftThinkingEngine` (generate_soft: soft-thinking rollouts), `RegeneratingEngine` (regenerate: chosen
rows again in full precision) and `InterruptibleEngine`
(interrupt: a weight update cuts `generate` short; `covey.engine.carry` continues the rows). Rollout strategies declare
which they need; the config check refuses an engine that lacks one, by name.

`TorchEngine` implements all three for Llama-family HF models with a hand-written KV-cache decode
loop (`TreeDecoder` is its tree session); `filter_logits` / `sample_tokens` are the sampling math.
`VllmEngine` (`engine: vllm`, an optional install) implements `Engine` with vLLM in this process.
`MaskedDiffusionEngine` (`engine: masked_diffusion`) generates with masked-diffusion models (docs/diffusion.md).
The learner's log-prob forward lives in `covey.learner`, the comparison with HF `generate` in
`covey.bench`, chat templates in `covey.models`.
"""

from covey.engine.base import (
    ENGINES,
    Engine,
    ForkingEngine,
    Generation,
    HiddenStatesEngine,
    RegeneratingEngine,
    ScoringEngine,
    SoftThinkingEngine,
    InterruptibleEngine,
    Row,
    SamplingParams,
    TreeSession,
    register_engine,
)
from covey.engine.diffusion import MaskedDiffusionEngine
from covey.engine.forward import KVCache
from covey.engine.sampling import filter_logits, inverse_cdf, sample_tokens
from covey.engine.torch_engine import TorchEngine
from covey.engine.tree import TreeDecoder
from covey.engine.vllm_engine import VllmEngine

__all__ = [
    "ENGINES",
    "Engine",
    "ForkingEngine",
    "Generation",
    "HiddenStatesEngine",
    "RegeneratingEngine",
    "ScoringEngine",
    "SoftThinkingEngine",
    "InterruptibleEngine",
    "KVCache",
    "MaskedDiffusionEngine",
    "Row",
    "SamplingParams",
    "TorchEngine",
    "TreeDecoder",
    "TreeSession",
    "VllmEngine",
    "filter_logits",
    "inverse_cdf",
    "register_engine",
    "sample_tokens",
]
