"""Engines that fail, for the thread executor's error tests (loaded by import path from a config)."""

from covey.engine.torch_engine import TorchEngine


class FailingEngine(TorchEngine):
    """A torch engine whose `fail_at`-th generate call (0-based) raises."""

    def __init__(self, model, tokenizer=None, *, fail_at: int = 1, **kw):
        super().__init__(model, tokenizer, **kw)
        self.fail_at, self.calls = fail_at, 0

    def generate(self, prompts, n, sampling):
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            raise RuntimeError(f"fake engine failure at call {self.fail_at}")
        return super().generate(prompts, n, sampling)
