"""covey.engine: generation only (token ids in, sampled ids + behaviour log-probs out).

`TorchEngine` implements the `Engine` protocol for Llama-family HF models with a hand-written
KV-cache decode loop; `filter_logits` / `sample_tokens` are the sampling math. The learner's
log-prob forward lives in `covey.learner`, the comparison with HF `generate` in `covey.bench`,
chat templates in `covey.models`.
"""

from covey.engine.base import ENGINES, Engine, Generation, SamplingParams, register_engine
from covey.engine.forward import KVCache
from covey.engine.sampling import filter_logits, inverse_cdf, sample_tokens
from covey.engine.torch_engine import TorchEngine

__all__ = [
    "ENGINES",
    "Engine",
    "Generation",
    "KVCache",
    "SamplingParams",
    "TorchEngine",
    "filter_logits",
    "inverse_cdf",
    "register_engine",
    "sample_tokens",
]
