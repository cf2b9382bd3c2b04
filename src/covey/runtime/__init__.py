"""How the training loop is executed (`runtime:` config): inline, or generation in a background
thread with a bounded staleness (`covey.runtime.thread`, `covey.runtime.staleness`), optionally
with the engine in a Ray actor (`covey.runtime.ray_engine`, imported only then); docs/runtime.md."""

from covey.runtime.config import RuntimeConfig
from covey.runtime.staleness import StalenessGate, staleness_metrics
from covey.runtime.thread import GenerationFailed, ThreadExecutor

__all__ = ["GenerationFailed", "RuntimeConfig", "StalenessGate", "ThreadExecutor", "staleness_metrics"]
