"""A sampler of your own: prompts whose last group scored nothing get `extra` more completions.

It subclasses covey's `BaseSampler` (required) and overrides only what it needs; every other hook
keeps its no-op default. See docs/sampling.md, "Writing a sampler".
"""

from covey.samplers import BaseSampler, Draw, Feedback


class HardFirst(BaseSampler):
    def __init__(self, items, seed, *, extra: int = 4):
        super().__init__(items, seed)
        self.extra, self.pos, self.failed = extra, 0, set()

    def next(self, k, group_size):
        """The next k items in order; a prompt that failed last time gets `extra` more completions."""
        out = [self.items[(self.pos + i) % len(self.items)] for i in range(k)]
        self.pos += k
        return [Draw(it, group_size + (self.extra if it["id"] in self.failed else 0)) for it in out]

    def observe(self, batch):
        """Remember which prompts scored nothing (every row's reward <= 0); keep every row in the loss."""
        best = {}
        for pid, r in zip(batch.prompt_id.tolist(), batch.scalar_rewards().tolist()):
            best[pid] = max(best.get(pid, r), r)
        for pid, r in best.items():
            (self.failed.add if r <= 0 else self.failed.discard)(pid)
        return Feedback({"sampler/hard_first/failed": float(len(self.failed))})

    def state_dict(self):
        return {"pos": self.pos, "failed": sorted(self.failed)}

    def load_state_dict(self, state):
        self.pos, self.failed = state["pos"], set(state["failed"])
