"""covey.eval: metrics over sampled completions (pass@k, maj@k) and the evaluation runner."""

from covey.eval.metrics import maj_at_k, majority_vote, mean_pass_at_k, pass_at_k
from covey.eval.runner import evaluate

__all__ = ["evaluate", "maj_at_k", "majority_vote", "mean_pass_at_k", "pass_at_k"]
