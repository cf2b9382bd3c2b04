"""covey: group-relative RL for language models. `GRPOTrainer` is the Python API (covey.api);
`GRPOConfig` takes TRL's training arguments (covey.trl_args).

Importing covey imports nothing heavy (`covey --help` answers in about a second); torch and
transformers load with the first thing that needs them. Before that, libgomp's idle threads are told
to sleep rather than spin (`OMP_WAIT_POLICY=PASSIVE`, unless the variable is set): on a machine with
other work a spinning OpenMP thread takes a core another process needs (`covey.train.threads`). It
takes effect only when covey is imported before torch.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from covey.version import __version__  # noqa: E402

__all__ = ["GRPOConfig", "GRPOTrainer", "Rollouts", "__version__"]


def __getattr__(name: str):
    if name == "GRPOTrainer":  # imported lazily: `import covey` stays light
        from covey.api import GRPOTrainer

        return GRPOTrainer
    if name == "GRPOConfig":
        from covey.trl_args import GRPOConfig

        return GRPOConfig
    if name == "Rollouts":
        from covey.rollouts import Rollouts

        return Rollouts
    raise AttributeError(f"module 'covey' has no attribute {name!r}")
