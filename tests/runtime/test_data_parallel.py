"""DataParallelLearner: 2 gloo processes give the one-process gradient within 1e-6 of its largest
entry (float32 sums in another order; measured 2.3e-6 / 4.7 = 5e-7 for grpo) (tiny-llama,
micro-batches of 2 so the shards run different numbers of micro-batches, an all-masked row)."""

import copy

import pytest
import torch
import torch.multiprocessing as mp

from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.logprobs import completion_logprobs
from covey.models import load
from tests.learner.test_learner_shared import _batch

PRESETS = ["grpo", "dapo", "dr_grpo"]  # seq-mean-token-mean, token-mean, constant normaliser


def _model():
    model, _ = load("tiny-llama", seed=3)
    return model.float()


def _grads(cls, model, preset, **kw):
    """Gradients after one update with lr 0 (the parameters stay, the gradients are kept)."""
    model = copy.deepcopy(model)
    learner = cls(model, torch.optim.SGD(model.parameters(), lr=0.0), None, resolve_algo({"preset": preset}),
                  temperature=1.0, max_new_tokens=7, dtype="fp32", micro_batch_size=2, grad_clip=None, **kw)  # fmt: skip
    batch = _batch(model.config.vocab_size, seed=1)
    with torch.no_grad():  # sampled by these weights: ratios near 1, gradients of a realistic size
        lp, _ = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.0)
    batch.behaviour_logprobs = lp * batch.completion_mask
    metrics = learner.update(batch, torch.Generator().manual_seed(0))
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, metrics["learn/loss"]


def _rank(rank, world, init, out):
    torch.set_num_threads(1)
    from covey.runtime.data_parallel import DataParallelLearner, init_group

    init_group(rank, world, init, backend="gloo")
    model = _model()
    if rank == 1:  # a different init on rank 1: the learner broadcasts rank 0's weights
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
    torch.save({p: _grads(DataParallelLearner, model, p) for p in PRESETS}, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_two_gloo_ranks_give_the_one_process_gradient(tmp_path):
    mp.spawn(_rank, args=(2, f"file://{tmp_path}/rendezvous", str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    model = _model()
    for preset in PRESETS:
        ref, ref_loss = _grads(Learner, model, preset)
        scale = max(float(g.abs().max()) for g in ref.values())
        assert scale > 1e-3, scale  # a real gradient
        for grads, loss in (r[preset] for r in ranks):
            assert grads.keys() == ref.keys()
            assert loss == pytest.approx(ref_loss, rel=1e-6)  # float32 sums in another order
            for name, g in ref.items():
                diff = float((grads[name] - g).abs().max())
                assert diff <= 1e-6 * scale, (preset, name, diff, scale)  # 1e-6 of the gradient's size (float32)
