"""covey.eval: metrics over sampled completions (pass@k, maj@k) and the evaluation runner.

The names load on first use (`covey compare` imports the study math without the runner's model stack)."""

from importlib import import_module

_HOME = {"evaluate": "runner", "maj_at_k": "metrics", "majority_vote": "metrics", "mean_pass_at_k": "metrics",
         "pass_at_k": "metrics"}  # fmt: skip

__all__ = ["evaluate", "maj_at_k", "majority_vote", "mean_pass_at_k", "pass_at_k"]


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"covey.eval.{_HOME[name]}"), name)
    raise AttributeError(f"module 'covey.eval' has no attribute {name!r}")
