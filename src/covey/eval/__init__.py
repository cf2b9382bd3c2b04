"""covey.eval: metrics over sampled completions (pass@k, maj@k); the evaluation runner joins later."""

from covey.eval.metrics import maj_at_k, majority_vote, mean_pass_at_k, pass_at_k

__all__ = ["maj_at_k", "majority_vote", "mean_pass_at_k", "pass_at_k"]
