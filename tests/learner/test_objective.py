"""The learner's one update path with the loss handed in (`covey.learner.objective`): every hook is
called in order, micro-batches accumulate one optimizer step, metrics are weighted means, a stop
signal ends the update, and an objective with nothing to learn leaves the model untouched."""

import copy

import pytest
import torch

from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.objective import Objective, Step
from covey.models import load
from covey.rollouts import Rollouts


@pytest.fixture(scope="module")
def tiny():
    model, _ = load("tiny-llama", seed=5)
    return model.float()


def _batch(vocab: int) -> Rollouts:
    """4 rows, 2 prompts of 2 rows, 3 + 2 + 4 + 1 = 10 real tokens."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, vocab, (4,), generator=g) for _ in range(2)]
    mask = (torch.arange(4)[None, :] < torch.tensor([3, 2, 4, 1])[:, None]).float()
    return Rollouts(
        prompt_ids=[prompts[i].clone() for i in (0, 0, 1, 1)], completion_ids=torch.randint(5, vocab, (4, 4), generator=g),
        completion_mask=mask, behaviour_logprobs=torch.zeros(4, 4), group=torch.tensor([0, 0, 1, 1]),
        prompt_id=torch.tensor([0, 0, 1, 1]),
    ).validate()  # fmt: skip


class MeanLogp(Objective):
    """-sum(logp * mask) / (tokens of the mini-batch): a toy loss that records every call."""

    uses_advantages = False

    def __init__(self, stop_after: int | None = None, nothing: bool = False):
        self.calls: list[str] = []
        self.stop_after, self.nothing, self.steps = stop_after, nothing, 0

    def prepare(self, learner, batch, generator):
        self.calls.append("prepare")
        return (None if self.nothing else batch), {}, {"toy/prepared": 1.0}

    def mini_batches(self, learner, batch, generator):
        self.calls.append("mini_batches")
        return [torch.tensor([0, 1]), torch.tensor([2, 3])]

    def begin_step(self, learner, mb, extra):
        self.calls.append("begin_step")
        return Step(mb, extra, [torch.tensor([0]), torch.tensor([1])], totals=float(mb.completion_mask.sum()))

    def loss(self, learner, micro, mask, totals, extra, *, observe=False, logp=None, old=None):
        self.calls.append("loss")
        logp, _ = learner.logprobs(learner.model, micro)
        tokens = float(mask.sum())
        return -(logp * mask).sum() / totals, {"toy/tokens": (tokens, tokens), "toy/rows": (float(len(micro)), 1.0)}

    def end_step(self, learner, mb, totals, stats):
        self.calls.append("end_step")
        self.steps += 1
        return self.stop_after is not None and self.steps > self.stop_after

    def after_step(self):
        self.calls.append("after_step")
        return {"toy/after_step": float(self.steps)}

    def finish(self, stopped):
        self.calls.append("finish")
        return {"toy/stopped": float(stopped)}


def _learner(model, objective, epochs=1, lr=0.1):
    return Learner(model, torch.optim.SGD(model.parameters(), lr=lr), None, resolve_algo({}), objective=objective,
                   temperature=1.0, max_new_tokens=4, dtype="fp32", epochs=epochs)  # fmt: skip


def test_hooks_run_in_order_and_micro_batches_add_up_to_one_step(tiny):
    obj = MeanLogp()
    model = copy.deepcopy(tiny)
    m = _learner(model, obj, epochs=2).update(_batch(tiny.config.vocab_size), torch.Generator().manual_seed(0))
    step = ["begin_step", "loss", "loss", "end_step", "after_step"]
    assert obj.calls == ["prepare", "mini_batches", *step, *step, "mini_batches", *step, *step, "finish"]
    # rows 0, 1 then 2, 3: 3 + 2 and 4 + 1 tokens; the token-weighted mean of per-micro token counts
    assert m["toy/tokens"] == pytest.approx((3 * 3 + 2 * 2 + 4 * 4 + 1 * 1) / 10)
    assert m["toy/rows"] == 1.0 and m["toy/prepared"] == 1.0 and m["toy/stopped"] == 0.0
    assert m["toy/after_step"] == pytest.approx((1 + 2 + 3 + 4) / 4)
    # one optimizer step over two micro-batches moves the weights as one over the whole mini-batch
    split, whole = copy.deepcopy(tiny), copy.deepcopy(tiny)
    b = _batch(tiny.config.vocab_size).select([0, 1])
    for model, chunks in ((split, [torch.tensor([0]), torch.tensor([1])]), (whole, [torch.arange(2)])):
        obj = MeanLogp()
        obj.mini_batches = lambda learner, batch, gen: [torch.arange(2)]
        obj.begin_step = lambda learner, mb, extra, c=chunks: Step(mb, extra, c, totals=float(mb.completion_mask.sum()))
        _learner(model, obj).update(b, torch.Generator())
    gap = max(float((p - q).abs().max()) for p, q in zip(split.parameters(), whole.parameters()))
    moved = max(float((p - q).abs().max()) for p, q in zip(split.parameters(), tiny.parameters()))
    assert moved > 1e-4 and gap <= 1e-5 * moved + 1e-7


def test_a_stop_signal_skips_the_step_and_ends_the_update(tiny):
    obj = MeanLogp(stop_after=1)
    model = copy.deepcopy(tiny)
    m = _learner(model, obj, epochs=3).update(_batch(tiny.config.vocab_size), torch.Generator().manual_seed(0))
    assert obj.calls.count("end_step") == 2 and obj.calls.count("after_step") == 1 and obj.calls[-1] == "finish"
    assert m["toy/stopped"] == 1.0 and "learn/stop" not in m


def test_nothing_to_learn_returns_the_prepare_metrics_and_keeps_the_model(tiny):
    obj = MeanLogp(nothing=True)
    model = copy.deepcopy(tiny)
    m = _learner(model, obj).update(_batch(tiny.config.vocab_size), torch.Generator())
    assert obj.calls == ["prepare"] and m == {"toy/prepared": 1.0}
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), tiny.parameters()))
