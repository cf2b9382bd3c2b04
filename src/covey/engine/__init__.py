"""covey.engine: generation (token ids in, sampled ids + behaviour log-probs out) and learner log-probs.

`TorchEngine` implements the `Engine` protocol for Llama-family HF models with a hand-written
KV-cache decode loop; `completion_logprobs` recomputes the same log-probs with autograd for the
learner; `filter_logits` / `sample_tokens` are the sampling math; `bench_generate` compares the
engine with HF `generate`. Chat templates live in `covey.models`.
"""

from covey.engine.base import Engine, SamplingParams
from covey.engine.sampling import filter_logits, sample_tokens
from covey.engine.torch_engine import TorchEngine

__all__ = ["Engine", "SamplingParams", "TorchEngine", "filter_logits", "sample_tokens"]
