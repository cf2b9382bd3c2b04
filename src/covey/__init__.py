"""covey: group-relative RL for language models. `GRPOTrainer` is the Python API (covey.api)."""

from covey.rollouts import Rollouts

__all__ = ["GRPOTrainer", "Rollouts"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "GRPOTrainer":  # imported lazily: `import covey` stays light
        from covey.api import GRPOTrainer

        return GRPOTrainer
    raise AttributeError(f"module 'covey' has no attribute {name!r}")
