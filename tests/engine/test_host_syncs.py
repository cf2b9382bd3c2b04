"""The decode loop's host reads, counted on the CPU along the code path CUDA takes.

On CUDA every read of a tensor's value on the host (`.item()`, `bool(t)`, `int(t)`, `.tolist()`,
`nonzero`, boolean-mask indexing) and every table built from a Python list (`torch.tensor([...])`,
a host-to-device copy) makes the host wait for the GPU. `covey.devices.host_reads_free` is the one
switch the engine asks; emptying `_HOST_SYNC_FREE` makes the CPU take the CUDA path, and a dispatch
mode counts those operations. Counting two runs that differ only in `max_new_tokens` leaves the
per-token reads: the setup and the final copy cancel out.

tests/gpu/test_cuda.py checks the same rule with `torch.cuda.set_sync_debug_mode` on a GPU.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from covey import devices
from covey.engine import SamplingParams, TorchEngine
from covey.models import load

aten = torch.ops.aten
# Ops that read a value back to the host (or, lift_fresh, build a tensor from host data).
_READS = {aten._local_scalar_dense.default, aten.item.default, aten.nonzero.default, aten.masked_select.default, aten.lift_fresh.default,
          aten._unique2.default, aten.unique_consecutive.default}  # fmt: skip


class HostReads(TorchDispatchMode):
    """Counts host reads (see `_READS`, boolean-mask indexing and `Tensor.tolist`) while active."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        mask_index = func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default) and any(
            i is not None and i.dtype == torch.bool for i in args[1]
        )
        if func in _READS or mask_index:
            self.count += 1
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._tolist = torch.Tensor.tolist
        mode = self

        def tolist(t):
            mode.count += 1
            mode.ops.append("tolist")
            return mode._tolist(t)

        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-llama", initializer_range=0.2, seed=5)


@pytest.fixture
def cuda_path(monkeypatch):
    """The CPU takes the accelerator's code paths (no value-dependent shortcuts, sync_every 8)."""
    monkeypatch.setattr(devices, "_HOST_SYNC_FREE", frozenset())


def _prompts(tok):
    return [tok.encode("What is 12+7?"), tok.encode("1"), tok.encode("hello, world: abc")]


def _reads(engine, tok, **sampling) -> int:
    with HostReads() as mode:
        engine.generate(_prompts(tok), 4, SamplingParams(seed=0, **sampling))
    return mode.count


def test_a_run_that_cannot_stop_early_reads_the_host_a_fixed_number_of_times(tiny, cuda_path):
    """ignore_eos and no stops (the GPU benchmark's setting): no host read per token at all."""
    model, tok = tiny
    engine = TorchEngine(model, dtype="bf16", tokenizer=tok)
    assert engine.sync_every == 8
    short, long = (_reads(engine, tok, max_new_tokens=m, ignore_eos=True) for m in (16, 48))
    assert long == short


@pytest.mark.parametrize("sync_every", [None, 4])
def test_stop_tokens_are_counted_only_every_sync_every_steps(tiny, cuda_path, sync_every):
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok, sync_every=sync_every)
    k = engine.sync_every
    free = engine.generate(_prompts(tok), 4, SamplingParams(seed=0, max_new_tokens=48, ignore_eos=True))
    never = (min(set(range(model.config.vocab_size)) - set(free.completion_ids.flatten().tolist())),)
    sp = dict(ignore_eos=True, stop_token_ids=never)  # a stop token no row samples: every row runs to the end
    out = engine.generate(_prompts(tok), 4, SamplingParams(seed=0, max_new_tokens=48, **sp))
    assert set(out.finish_reason) == {"length"}
    short, long = (_reads(engine, tok, max_new_tokens=m, **sp) for m in (16, 48))
    assert long - short == (48 - 16) // k  # one count of finished rows per k tokens


def test_the_cuda_path_gives_the_cpu_path_tokens(tiny, monkeypatch):
    model, tok = tiny
    sp = SamplingParams(max_new_tokens=24, seed=3, top_p=0.9, return_entropies=True)
    ref = TorchEngine(model, dtype="fp32", tokenizer=tok).generate(_prompts(tok), 3, sp)
    monkeypatch.setattr(devices, "_HOST_SYNC_FREE", frozenset())
    out = TorchEngine(model, dtype="fp32", tokenizer=tok).generate(_prompts(tok), 3, sp)
    assert torch.equal(out.completion_ids, ref.completion_ids) and torch.equal(out.completion_mask, ref.completion_mask)
    assert torch.allclose(out.logprobs, ref.logprobs, atol=1e-6) and out.finish_reason == ref.finish_reason


def test_the_counter_sees_a_per_token_table_built_from_a_list(tiny, cuda_path, monkeypatch):
    """The bug the GPU found (82 syncs for 64 tokens): step_tables built its head scales with
    torch.tensor([...]) each decode step. Put that back and the count grows by one per token."""
    from covey.engine import forward

    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok)
    tables = forward.step_tables

    def per_step_list(w, pos, valid, col):
        torch.tensor([w.scaling] * w.n_heads)
        return tables(w, pos, valid, col)

    monkeypatch.setattr(forward, "step_tables", per_step_list)
    short, long = (_reads(engine, tok, max_new_tokens=m, ignore_eos=True) for m in (16, 48))
    assert long - short == 48 - 16
