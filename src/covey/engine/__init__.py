"""covey.engine: generation (token ids in, sampled ids + behaviour log-probs out) and learner log-probs.

`TorchEngine` implements the `Engine` protocol for Llama-family HF models with a hand-written
KV-cache decode loop; `completion_logprobs` recomputes the same log-probs with autograd for the
learner; `filter_logits` / `sample_tokens` are the sampling math; `bench_generate` compares the
engine with HF `generate`. Chat templates live in `covey.models`.
"""

from covey.engine.base import ENGINES, Engine, Generation, SamplingParams, register_engine
from covey.engine.bench import bench_generate
from covey.engine.forward import KVCache
from covey.engine.logprobs import completion_logprobs, token_logprobs_from_logits
from covey.engine.sampling import filter_logits, inverse_cdf, sample_tokens
from covey.engine.torch_engine import TorchEngine

__all__ = [
    "ENGINES",
    "Engine",
    "Generation",
    "KVCache",
    "SamplingParams",
    "TorchEngine",
    "bench_generate",
    "completion_logprobs",
    "filter_logits",
    "inverse_cdf",
    "register_engine",
    "sample_tokens",
    "token_logprobs_from_logits",
]
