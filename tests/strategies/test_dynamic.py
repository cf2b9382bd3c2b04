"""`dynamic`: the wrapped strategy's metrics are the mean over the step's rounds, not the last round's."""

from covey.samplers import Draw
from covey.strategies.base import RolloutContext
from covey.strategies.dynamic import DynamicSampling
from tests.samplers._helpers import scored

ROUNDS = [([0, 0], 5.0), ([1, 1], 0.0), ([0, 1], 1.0)]  # (two rows of one prompt: successes, decoded tokens)


class Scripted:
    """Round k: one group of two rows with ROUNDS[k]'s successes; reports ROUNDS[k]'s decoded tokens."""

    def __init__(self):
        self.k = 0

    def rollout(self, items, ctx):
        succ, decoded = ROUNDS[self.k]
        self.k += 1
        return scored([7, 7], succ, [0, 0]), {"inner/decoded_tokens": decoded}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_inner_metrics_are_averaged_over_the_rounds():
    dyn = DynamicSampling(inner="tests.strategies.test_dynamic:Scripted", max_rounds=3)
    ctx = RolloutContext(engine=None, tokenizer=None, draws=[Draw({"id": 7, "prompt": "x"}, 2)], sampling=lambda r: None,
                         score=lambda b: {}, draw=lambda k: [Draw({"id": 7, "prompt": "x"}, 2)] * k)  # fmt: skip
    batch, m = dyn.rollout([{"id": 7, "prompt": "x"}], ctx)
    # rounds 1 and 2 have equal rewards (dropped), round 3 is informative: 3 rounds, the last kept
    assert m["filter/gen_batches"] == 3 and m["filter/kept_groups"] == 1 and len(batch) == 2
    assert m["inner/decoded_tokens"] == 2.0  # (5 + 0 + 1) / 3, not the last round's 1
