"""Where a run's tensors live: `device: auto | cpu | cuda | cuda:N` (auto = CUDA when present).

One home for parsing and checking the spelling, used by the config, `covey eval`, `covey sft` and the
bench commands, so every entry point gives the same error for the same mistake.

`host_reads_free(device)`: whether reading a tensor's value on the host (`bool(t.any())`, `.item()`,
`.tolist()`, `nonzero`) costs nothing beyond the read itself. True on the CPU; on CUDA each read
waits for the GPU to drain its queue (a host synchronisation), so per-token code asks this before
branching on a value. The device types it holds true for are `_HOST_SYNC_FREE`; a test empties that
set to run the accelerator code paths on the CPU and count their host reads
(tests/engine/test_host_syncs.py).
"""

from __future__ import annotations

import re

import torch

__all__ = ["check_device", "host_reads_free", "resolve_device"]

_HOST_SYNC_FREE = frozenset({"cpu"})


def check_device(spec: str) -> str:
    """`spec` unchanged if it names a device this machine has; a ValueError naming the problem otherwise."""
    if spec not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", spec):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={spec!r} but CUDA is not available on this machine (use cpu or auto)")
        if ":" in spec and int(spec.split(":")[1]) >= torch.cuda.device_count():
            raise ValueError(f"device={spec!r} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    return spec


def resolve_device(spec: str = "auto") -> torch.device:
    """The torch device for `spec` (checked): auto = cuda when CUDA is available, else cpu."""
    spec = check_device(spec)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def host_reads_free(device: torch.device | str) -> bool:
    """Whether branching on a tensor's value on `device` is free (no host synchronisation): the CPU."""
    return torch.device(device).type in _HOST_SYNC_FREE
