"""The sharded learner (`runtime.sharding: fsdp2`): torch's FSDP2 (`fully_shard`) over the learner ranks.

Every decoder layer (the model's `_no_split_modules` classes, as verl and accelerate choose them) is
one FSDP unit, and a root unit holds the rest (embeddings, final norm, head; tied weights stay one
parameter). Each rank keeps 1/world of every parameter, of its gradient and of the AdamW moments
(the optimizer is built on the sharded parameters, so its state is sharded too); a layer's full
parameters exist only while that layer runs (all-gather before, free after; reduce-scatter of its
gradient in the backward).

The update is the data-parallel one (`covey.runtime.data_parallel`): every rank has the whole
mini-batch, divides by the **global** token and sequence counts, and trains its contiguous shard
of rows, so the sum over ranks of the shards' gradients is the one-process gradient. FSDP's
reduce-scatter therefore **sums** (`set_gradient_divide_factor(1)`, not FSDP's default mean).
Gradient clipping is `clip_grad_norm_` on the DTensor gradients (the norm is reduced over ranks).

Collectives pair up by order, so every rank must run the same sequence of forwards and backwards:
- the root's forward is the learner's whole log-prob forward (`_Forward`), so the head and the
  embeddings are gathered for it and their gradients reduced after it;
- prompt sharing is off (`share_prompts=False`: it runs the decoder twice for some micro-batches
  and once for others, which would pair different layers' all-gathers across ranks);
- a rank with fewer micro-batches (its shard is shorter, or rows were skipped) runs zero-weight
  forwards and backwards of one token until every rank has run as many (`_pad_forwards`); every
  rank computes every rank's count from the mini-batch, which all hold, so no extra collective is
  needed (one would pair with a busier peer's all-gather).

Mixed precision: on CUDA with the learner's dtype bf16, parameters are gathered in bf16 and
gradients are reduced in fp32 (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, verl's
and torchtitan's default); the sharded master weights and AdamW state stay fp32. On the CPU, and in
fp32, no policy: fp32 shards, and the learner's bf16 autocast when `model.dtype` says bf16, exactly
as one process computes. `runtime.fsdp_offload`: FSDP2's
`CPUOffloadPolicy` keeps the sharded parameters, gradients and optimizer state in (pinned) CPU memory
and the optimizer steps on the CPU (for GPUs; refused on a CPU learner).

Weights leave the learner by `full_state_buckets`: one parameter at a time is all-gathered
(`DTensor.full_tensor`, every rank takes part), copied to the CPU on rank 0, and handed over in
buckets of at most `bucket_bytes`, so no rank ever holds a second full copy of the model on its device.

Checked against the torch 2.13 FSDP2 API (fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy,
FSDPModule.set_gradient_divide_factor); the layer choice follows verl's `get_fsdp_wrap_policy`
(volcengine/verl, `verl/utils/fsdp_utils.py`: `_no_split_modules`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

from covey.algos.registry import BatchTotals
from covey.learner.learner import Learner
from covey.learner.policy_loss import PolicyLoss, rows_with_signal
from covey.runtime.data_parallel import step_rows

__all__ = ["ShardedLearner", "full_state_buckets", "local_bytes", "shard_model", "shard_units"]


def _base(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules that become their own FSDP unit: those whose class the HF model lists in
    `_no_split_modules` (the decoder layers). Refuses a model that names none."""
    names = set(getattr(_base(model), "_no_split_modules", None) or ())
    units = [m for m in model.modules() if type(m).__name__ in names]
    if not units:
        raise ValueError(f"runtime.sharding fsdp2: {type(_base(model)).__name__} names no decoder-layer class in "
                         "_no_split_modules, so covey cannot tell which modules to shard one by one")  # fmt: skip
    return units


class _Forward(nn.Module):
    """The FSDP root: `forward(fn, ...)` runs fn(policy, ...) (the learner's log-prob forward), so the
    root's hooks gather what the layers do not own for the whole forward and reduce its gradients."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, fn, *args, **kwargs):
        return fn(self.policy, *args, **kwargs)


def shard_model(model: nn.Module, *, bf16: bool, offload: bool = False, group=None) -> nn.Module:
    """Shard `model` in place over `group` (each unit of `shard_units`, then a root over the rest);
    returns the root (`_Forward`). Rank 0's weights are broadcast first, as DDP does."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    device = next(model.parameters()).device
    with torch.no_grad():
        src = dist.get_global_rank(group, 0) if group is not None else 0
        for p in model.parameters():
            dist.broadcast(p.data, src=src, group=group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    mesh = DeviceMesh.from_group(group or dist.group.WORLD, device.type, mesh=torch.tensor(ranks))
    # GPU: gather bf16 parameters, reduce fp32 gradients. CPU: fp32 shards under the learner's autocast,
    # as one process computes (bf16 parameters would round the norms' weights too: 1% off its loss)
    cuda_bf16 = bf16 and device.type == "cuda"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if cuda_bf16 else MixedPrecisionPolicy()
    kw = dict(mesh=mesh, mp_policy=mp, offload_policy=CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if offload else OffloadPolicy())
    for unit in shard_units(model):
        fully_shard(unit, **kw)
    root = _Forward(model)
    fully_shard(root, **kw)
    root.compute_device = device  # under CPU offload the shards live on the CPU, the forward on `device`
    for m in root.modules():  # the ranks' shard gradients are summed: each is already divided by the global totals
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            if hasattr(m, "set_force_sum_reduction_for_comms"):  # plain SUM (gloo has no PREMUL_SUM; NCCL copies less)
                m.set_force_sum_reduction_for_comms(True)
    return root


def _local(t: Tensor) -> Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def local_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes this rank holds of the parameters, their gradients and the optimizer state (local shards)."""
    size = lambda t: _local(t).numel() * _local(t).element_size()  # noqa: E731
    out = {"params": sum(size(p) for p in model.parameters()),
           "grads": sum(size(p.grad) for p in model.parameters() if p.grad is not None), "optimizer": 0}  # fmt: skip
    if optimizer is not None:
        out["optimizer"] = sum(size(v) for s in optimizer.state.values() for v in s.values() if isinstance(v, Tensor))
    return out


def full_state_buckets(named: Iterator[tuple[str, Tensor]], bucket_bytes: int, keep: bool) -> Iterator[dict[str, Tensor]]:
    """All-gather (name, tensor) pairs one at a time (every rank must iterate, in the same order) and
    yield dicts of full CPU tensors of at most `bucket_bytes` (a larger tensor alone); `keep=False`
    (ranks other than the receiver) takes part in the gathers and yields empty dicts."""
    bucket: dict[str, Tensor] = {}
    size = 0
    for name, t in named:
        full = t.full_tensor() if hasattr(t, "full_tensor") else t
        nbytes = full.numel() * full.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        if keep:
            bucket[name] = full.detach().to("cpu", copy=True)
        size += nbytes
        del full
    if bucket or size:
        yield bucket


class ShardedLearner(Learner):
    """A `Learner` on one rank of an FSDP2 group: `model` already sharded under `root` (`shard_model`)."""

    def __init__(self, root: nn.Module, *args, group=None, **kwargs):
        kwargs["share_prompts"] = False  # one decoder pass per micro-batch on every rank (module docstring)
        kwargs.setdefault("device", getattr(root, "compute_device", None))  # not the offloaded shards' CPU
        super().__init__(*args, **kwargs)
        if self.likelihood is not None or not isinstance(self.objective, PolicyLoss):
            raise ValueError("runtime.sharding fsdp2 runs the policy loss on token log-probs: not algo.likelihood (a "
                             "masked-diffusion estimator calls the model outside the sharded forward) nor preference "
                             "mode; use sharding: ddp")  # fmt: skip
        self.root, self.group = root, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self._totals: tuple[float, float] | None = None
        self._forwards = self._target = 0  # grad-enabled forwards of the policy in this optimizer step: run, planned

    def logprobs(self, model, batch, with_entropy: bool = False, stats: tuple[str, ...] = ()):
        if model is not self.model:
            return super().logprobs(model, batch, with_entropy, stats)
        grad = torch.is_grad_enabled()
        self._forwards += grad
        out = self.root(lambda policy: Learner.logprobs(self, policy, batch, with_entropy, stats))
        if not grad:  # FSDP keeps the root unsharded after its forward for the backward; none comes: free it now
            self.root.reshard()
        return out

    def _step(self, mb, extra=None):
        mask = mb.loss_mask()
        self._totals = (float(mask.sum()), float((mask.sum(-1) > 0).sum()))
        shards = torch.arange(len(mb)).tensor_split(self.world)
        # every rank has the whole mini-batch, so each knows how many forwards every rank will run
        self._target = max(self._forwards_of(mb.select(rows)) for rows in shards)
        self._forwards = 0
        return step_rows(super()._step, mb, shards[self.rank], extra, self.device, self.group)

    def _forwards_of(self, shard) -> int:
        """The grad-enabled forwards `Learner._step` runs on `shard`: its micro-batches with a loss token,
        after the policy loss leaves out the rows without signal (`PolicyLoss.skip_zero_rows`)."""
        if isinstance(self.objective, PolicyLoss) and self.objective.skip_zero_rows:
            shard = shard.select(rows_with_signal(shard, shard.loss_mask()))
        return sum(float(shard.select(idx).loss_mask().sum()) > 0 for idx in self._chunks(shard))

    def _loss(self, micro, mask, totals, *args, **kwargs):
        tokens, seqs = self._totals
        return super()._loss(micro, mask, BatchTotals(num_tokens=tokens, num_seqs=seqs, max_new_tokens=totals.max_new_tokens),
                             *args, **kwargs)  # fmt: skip

    def _pad_forwards(self) -> None:
        """Zero-weight one-token forwards and backwards until this rank has run as many as the busiest
        rank will (`_target`, known to all without a collective: one here would pair with a peer's
        all-gather)."""
        if self._forwards > self._target:
            raise RuntimeError(f"fsdp2 rank {self.rank} ran {self._forwards} forwards, more than the {self._target} "
                               "every rank planned for: the ranks' collectives would no longer pair")  # fmt: skip
        if self._forwards == self._target:
            return
        from covey.learner.learner import to_device
        from covey.rollouts import Rollouts

        one = torch.zeros(1, 1)
        dummy = Rollouts(prompt_ids=[torch.zeros(1, dtype=torch.long)], completion_ids=one.long(), completion_mask=one + 1,
                         behaviour_logprobs=one, group=torch.zeros(1, dtype=torch.long),
                         prompt_id=torch.zeros(1, dtype=torch.long))  # fmt: skip
        dummy = to_device(dummy, self.device)
        while self._forwards < self._target:
            logp = self.logprobs(self.model, dummy)[0]
            (logp.float().sum() * 0.0).backward()

    def _clip(self) -> float:
        self._pad_forwards()
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.grad_clip if self.grad_clip is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
