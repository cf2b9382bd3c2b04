"""Measured memory of a learner update and of a generate call on the CPU, to check `covey plan`.

What is measured: the bytes of live tensor storage, as torch's CUDA allocator counts them for
`torch.cuda.max_memory_allocated` (without its rounding and caching): `LiveBytes`, a dispatch mode,
adds every storage an operation creates while it is active and subtracts it when the storage is
freed (a finalizer on the storage), and keeps the high-water mark. Storages that exist before
(weights, AdamW state, the batch) are added by the caller. This is exact for tensors, independent of
the machine's load and of glibc's allocator (the process RSS is not: freed blocks stay mapped), and
blind to what a single kernel allocates inside itself and frees before returning (scratch space).

`learner_peak(cfg, prompt_tokens)` builds the policy, optimizer, reference and `Learner` of run
config `cfg` as the trainer does (`covey.train.setup`), makes one mini-batch of `prompt_tokens`-token
prompts with `sampling.max_new_tokens`-token completions (every token real, every advantage nonzero),
runs one warm-up update (AdamW's state appears in the first step), then measures a second update:
forward and backward of each micro-batch and the optimizer step. `engine_peak` measures building the
engine from the policy and one generate call of the step's rows (EOS ignored: every row runs to
max_new_tokens).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["LiveBytes", "engine_peak", "learner_peak", "storage_bytes"]


class LiveBytes(TorchDispatchMode):
    """Live bytes of the storages created while active (`live`) and their high-water mark (`peak`)."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._known: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = {_owner(t)._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                owner = _owner(t)
                if owner._cdata not in inputs:  # a view or an in-place result holds no new memory
                    self._track(owner, owner.nbytes() if owner is not t else t.numel() * t.element_size())
        return out

    def _track(self, owner, n: int) -> None:
        key = owner._cdata
        if key in self._known:
            return
        self._known.add(key)
        self.live += n
        self.peak = max(self.peak, self.live)
        weakref.finalize(owner, self._free, key, n)

    def _free(self, key: int, n: int) -> None:
        self._known.discard(key)
        self.live -= n


def _owner(t: torch.Tensor):
    """The storage that holds `t`'s memory, or `t` itself for an opaque tensor (oneDNN's packed weights)."""
    try:
        return t.untyped_storage()
    except NotImplementedError:
        return t


def storage_bytes(*objs) -> int:
    """Bytes of the distinct storages of the tensors in `objs` (modules, optimizers, tensors, nested
    lists/dicts/dataclasses of them)."""
    seen: dict[int, int] = {}

    def add(t: torch.Tensor) -> None:
        s = t.untyped_storage()
        seen.setdefault(s._cdata, s.nbytes())

    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            for t in list(obj.parameters()) + list(obj.buffers()):
                add(t)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for t in state.values():
                    if isinstance(t, torch.Tensor):
                        add(t)
        else:
            for t in tree_leaves(obj):
                if isinstance(t, torch.Tensor):
                    add(t)
    return sum(seen.values())


def _batch(cfg, tokenizer_vocab: int, prompt_tokens: int, seed: int = 0):
    """One step's Rollouts: prompts_per_step distinct prompts x group_size rows, every token real."""
    from covey.rollouts import Rollouts

    b, g, t = cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.sampling.max_new_tokens
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, tokenizer_vocab, (prompt_tokens,), generator=gen) for _ in range(b)]
    group = torch.arange(b).repeat_interleave(g)
    n = b * g
    return Rollouts(
        prompt_ids=[prompts[i] for i in group.tolist()],
        completion_ids=torch.randint(5, tokenizer_vocab, (n, t), generator=gen),
        completion_mask=torch.ones(n, t),
        behaviour_logprobs=-torch.rand(n, t, generator=gen),
        group=group,
        prompt_id=group.clone(),
        rewards=torch.rand(n, 1, generator=gen),
        reward_names=("accuracy",),
        reward_weights=torch.ones(1),
        advantages=torch.randn(n, generator=gen),
        ref_logprobs=-torch.rand(n, t, generator=gen),
    ).validate()


def learner_peak(cfg, prompt_tokens: int) -> dict[str, float]:
    """Bytes of one learner update of run config `cfg` on the CPU (see the module docstring):
    {"static": weights + optimizer state + reference + batch before the update, "update": the
    high-water mark of what the update adds, "peak": their sum}."""
    from covey.learner.learner import Learner
    from covey.learner.optim import build_optimizer
    from covey.train.setup import build_reference, load_policy

    model, tok = load_policy(cfg.model, device="cpu")
    need_ref = "ref_logprobs" in cfg.algo.requires()
    reference = build_reference(model, cfg.model) if need_ref else None
    optimizer, scheduler = build_optimizer(model, cfg.optim, cfg.steps)
    o = cfg.optim
    learner = Learner(model, optimizer, scheduler, cfg.algo, temperature=cfg.sampling.temperature,
                      max_new_tokens=cfg.sampling.max_new_tokens, epochs=o.epochs, mini_batches=o.mini_batches,
                      micro_batch_size=o.micro_batch_size, grad_clip=o.grad_clip, dtype=cfg.model.dtype,
                      skip_zero_advantage=False)  # fmt: skip
    batch = _batch(cfg, min(len(tok), model.config.vocab_size), prompt_tokens)
    gen = torch.Generator().manual_seed(0)
    learner.update(batch, gen)  # warm-up: AdamW's moments appear in the first step
    optimizer.zero_grad(set_to_none=True)
    static = storage_bytes(model, optimizer, batch) + (storage_bytes(reference._copy) if reference and reference._copy else 0)
    with LiveBytes() as live:
        learner.update(batch, gen)
    return {"static": float(static), "update": float(live.peak), "peak": float(static + live.peak)}


def engine_peak(cfg, prompt_tokens: int) -> dict[str, float]:
    """Bytes the engine of run config `cfg` adds on the CPU: its weights (built from the policy as the
    trainer builds it) and one generate call of the step's rows ({"weights", "generate", "peak"})."""
    from covey.engine import ENGINES, SamplingParams
    from covey.models.state import engine_model
    from covey.train.setup import load_policy

    model, tok = load_policy(cfg.model, device="cpu")
    params = dict(cfg.engine.params)
    params.setdefault("dtype", cfg.engine.params.get("dtype", cfg.model.dtype))
    if params["dtype"] == "auto":
        params["dtype"] = cfg.model.dtype
    gen = torch.Generator().manual_seed(0)
    vocab = min(len(tok), model.config.vocab_size)
    prompts = [torch.randint(5, vocab, (prompt_tokens,), generator=gen).tolist() for _ in range(cfg.rollout.prompts_per_step)]
    sp = SamplingParams(max_new_tokens=cfg.sampling.max_new_tokens, seed=0, ignore_eos=True)
    with LiveBytes() as build:
        engine = ENGINES.build(cfg.engine.name, params, engine_model(model), tok)
    weights = build.live  # what stays after the build
    with LiveBytes() as run:
        engine.generate(prompts, cfg.rollout.group_size, sp)
    engine.close()
    return {"weights": float(weights), "generate": float(run.peak), "peak": float(weights + run.peak)}
