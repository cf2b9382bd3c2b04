"""Data-parallel learning over a torch.distributed group: gloo on CPU, NCCL on GPU.

`DataParallelLearner` is the `Learner` on one rank. Every rank holds the same model, receives the
same batch and draws the same mini-batch order (the trainer's seeded generator). For each
mini-batch it:

1. computes the batch totals (tokens, sequences) over the **whole** mini-batch, which every rank has,
   so each aggregation (token-mean, seq-mean-token-mean, constant normalisers) divides by the same
   global count as one process would;
2. runs the usual micro-batched forward/backward on its shard of the rows (rank r takes the r-th of
   `world` contiguous slices of the mini-batch);
3. sums the gradients over the ranks with one all-reduce (a flat bucket) before clipping and the
   optimizer step. The sum of the shards' gradients of sum/global-count is the one-process
   gradient, so all ranks clip by the same global norm and take the same step (tested within 1e-6).

This is DDP's data parallelism with the reduction done once per optimizer step, as DDP does under
`no_sync()` for gradient accumulation: ranks may run different numbers of micro-batches (shards
differ in length) without a collective mismatch, which per-backward DDP hooks would turn into a
hang. It does not overlap communication with the backward pass (DDP's bucketed hooks do); on one
host with small models that overlap is not what limits a step. Parameters are broadcast from rank 0
when the learner is built, as DDP does.

FSDP2 path (not built, docs/runtime.md): wrap each decoder layer and then the model with
`torch.distributed.fsdp.fully_shard`; the same global totals apply, the gradient reduction moves
into FSDP's reduce-scatter (drop step 3), clipping needs the DTensor-aware `clip_grad_norm_`, and
weight sync gathers full tensors (`full_tensor()`) on rank 0 before pushing them to the engines.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from covey.algos.registry import BatchTotals
from covey.learner.learner import Learner

__all__ = ["DataParallelLearner", "all_reduce_grads", "init_group"]


def init_group(rank: int, world: int, init_method: str, backend: str | None = None, timeout_s: float | None = None):
    """Join the process group (backend: nccl when CUDA is available, else gloo). `timeout_s` bounds
    the rendezvous and every collective (a dead peer is an error after it, not a hang)."""
    from datetime import timedelta

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if not dist.is_initialized():
        timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=timeout)
    return dist.group.WORLD


def step_rows(step, mb, rows: torch.Tensor, extra: dict | None, device, group) -> dict:
    """One rank's part of a mini-batch step: `step` (the one-process `Learner._step`) on this rank's `rows`
    of `mb` and of the per-row inputs `extra`; the logged loss is the mini-batch's (the ranks' parts summed)."""
    shard = {k: v[rows.to(v.device)] for k, v in (extra or {}).items()}  # per-row inputs follow their rows
    stats = step(mb.select(rows), shard)
    loss = torch.tensor([stats["learn/loss"][0]], device=device)
    dist.all_reduce(loss, group=group)
    stats["learn/loss"] = (float(loss), 1.0)
    return stats


def all_reduce_grads(params: list[torch.Tensor], group=None) -> None:
    """Sum the gradients of `params` over the group in one flat all-reduce. A parameter without a
    gradient on this rank contributes zeros; when no rank has any gradient, all stay None."""
    params = [p for p in params if p.requires_grad]
    flag = torch.tensor([float(any(p.grad is not None for p in params))], device=params[0].device)
    dist.all_reduce(flag, group=group)
    if flag.item() == 0:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for p, g in zip(params, _unflatten_dense_tensors(flat, grads)):
        if p.grad is None:
            p.grad = g
        else:
            p.grad.copy_(g)


class DataParallelLearner(Learner):
    """A `Learner` on one rank of `group` (the default group when None); see the module docstring."""

    def __init__(self, *args, group=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        with torch.no_grad():
            for p in self.model.parameters():
                dist.broadcast(p.data, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
        self._totals: tuple[float, float] | None = None

    def _step(self, mb, extra=None):
        mask = mb.loss_mask()
        self._totals = (float(mask.sum()), float((mask.sum(-1) > 0).sum()))
        rows = torch.arange(len(mb)).tensor_split(self.world)[self.rank]
        return step_rows(super()._step, mb, rows, extra, self.device, self.group)

    def _loss(self, micro, mask, totals, *args, **kwargs):
        tokens, seqs = self._totals
        return super()._loss(micro, mask, BatchTotals(num_tokens=tokens, num_seqs=seqs, max_new_tokens=totals.max_new_tokens),
                             *args, **kwargs)  # fmt: skip

    def _clip(self) -> float:
        all_reduce_grads(list(self.model.parameters()), self.group)
        return super()._clip()

