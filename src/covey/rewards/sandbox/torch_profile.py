"""The `torch` sandbox profile: model-written PyTorch (and Triton, when installed) under bubblewrap.

Everything of the default sandbox holds (no network, own pid namespace, read-only system, private /tmp,
an unprivileged uid, rlimits; `_process.py`); in addition the directories that hold ``torch``, ``numpy``
and, when installed, ``triton`` (the running interpreter's site-packages, found with
`importlib.util.find_spec`, not imported) are bound read-only and put first on ``sys.path``. The
program runs with one thread per library (``OMP_NUM_THREADS=1`` and friends: RLIMIT_NPROC counts
threads) and with ``TRITON_INTERPRET=1``, so a ``@triton.jit`` kernel runs in Triton's CPU interpreter
and nothing is compiled. Importing torch needs far more address space than the stdlib sandbox's 512 MB
(`TORCH_LIMITS`).
"""

from __future__ import annotations

import functools
import importlib.util
import os

from .limits import SandboxLimits
from .profile import Profile

__all__ = ["TORCH_LIMITS", "torch_profile", "triton_available"]

# Measured (docs/sandbox.md): importing torch 2.13 + triton 3.9 and running one interpreted kernel peaks at
# ~0.8 GB of address space with one thread (it ran under 1 GB); 4 GB leaves room for the task's tensors.
TORCH_LIMITS = SandboxLimits(timeout_s=120.0, memory_mb=4096, nproc=64, nofile=256, tmpfs_mb=256,
                             max_drain_bytes=64 * 1024 * 1024)

_THREAD_ENV = (("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"),
               ("TORCHINDUCTOR_COMPILE_THREADS", "1"))


def _root_of(package: str) -> str | None:
    """The sys.path directory `package` is imported from (without importing it), or None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.realpath(list(spec.submodule_search_locations)[0]))


def triton_available() -> bool:
    """Whether ``import triton`` would find a package (the sandbox binds the same directory)."""
    return _root_of("triton") is not None


@functools.lru_cache(maxsize=1)
def torch_profile() -> Profile:
    """The profile: torch's, numpy's and (if present) triton's site directories, read-only, first on sys.path."""
    roots: list[str] = []
    for package in ("torch", "numpy", "triton"):
        root = _root_of(package)
        if root is None and package != "triton":
            raise RuntimeError(f"the torch sandbox profile needs {package}, which is not installed here")
        if root is not None and root not in roots:
            roots.append(root)
    env = (*_THREAD_ENV, ("TRITON_INTERPRET", "1"), ("TRITON_CACHE_DIR", "/tmp/.triton"))
    return Profile("torch", ro_paths=tuple(roots), env=env, sys_path=tuple(roots))
