"""covey.learner: the update. The policy's log-prob forward with autograd (`completion_logprobs`,
the fused lm-head + log-softmax `HeadLogprob`), prefix sharing for rows of one prompt group, the CPU
grouped-query attention kernel, and `Learner` (micro-batching, loss assembly from the algorithm
axes, the optimizer step).

The names load on first use: the config checks import `covey.learner.fillers` without the forward's
transformers stack (`covey config show` stays quick)."""

from importlib import import_module

__all__ = ["completion_logprobs", "token_logprobs_from_logits"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(import_module("covey.learner.logprobs"), name)
    raise AttributeError(f"module 'covey.learner' has no attribute {name!r}")
