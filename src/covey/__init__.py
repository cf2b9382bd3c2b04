"""covey: group-relative RL for language models. `GRPOTrainer` is the Python API (covey.api);
`GRPOConfig` takes TRL's training arguments (covey.trl_args)."""

from covey.rollouts import Rollouts
from covey.version import __version__

__all__ = ["GRPOConfig", "GRPOTrainer", "Rollouts", "__version__"]


def __getattr__(name: str):
    if name == "GRPOTrainer":  # imported lazily: `import covey` stays light
        from covey.api import GRPOTrainer

        return GRPOTrainer
    if name == "GRPOConfig":
        from covey.trl_args import GRPOConfig

        return GRPOConfig
    raise AttributeError(f"module 'covey' has no attribute {name!r}")
