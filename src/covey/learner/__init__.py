"""covey.learner: the update. The policy's log-prob forward with autograd (`completion_logprobs`,
the fused lm-head + log-softmax `HeadLogprob`), prefix sharing for rows of one prompt group, the CPU
grouped-query attention kernel, and `Learner` (micro-batching, loss assembly from the algorithm
axes, the optimizer step)."""

from covey.learner.logprobs import completion_logprobs, token_logprobs_from_logits

__all__ = ["completion_logprobs", "token_logprobs_from_logits"]
