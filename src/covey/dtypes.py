"""`dtype: auto`: pick bf16 or fp32 compute for a model on a device.

On CUDA the answer is bf16 whenever the GPU supports it (`torch.cuda.is_bf16_supported()`), fp32
otherwise. On CPU it depends on the machine: bf16 matmuls are several times faster than fp32 on CPUs
with AMX, about even with AVX512-BF16 alone, and slower without either (and even between two
machines with the same flags, one measured 55 GFLOP/s bf16 against 73-83 fp32 for one thread, the
other the opposite). So on CPU covey measures instead of reading /proc/cpuinfo: `cpu_prefers_bf16`
times an [64, H] x [H, 4H] matmul (the shape of a decode step's MLP at batch 64) in both dtypes, a few
alternating rounds of ~8 ms each (the best round of each dtype, so a burst of load from other
processes hurts both alike; 0.09-0.14 s in all on the loaded 2-core dev machine), and chooses bf16
only when it is at least `margin` (10%) faster. The answer is cached per process for each (hidden
size, thread count). Measured on that machine (AMD EPYC, avx512_bf16, no AMX; 1 thread, load ~4):
H=576 (SmolLM2) bf16 32-51 GFLOP/s vs fp32 24-27, H=192 (tiny) 50 vs 27: auto picks bf16 there. On
a quiet 2-core Intel Xeon (avx512_bf16, no AMX): H=576 bf16 75-77 vs fp32 119-121, H=192 73 vs
135-140: auto picks fp32, and a SmolLM2 training step runs ~1.55x faster than in bf16 there.
"""

from __future__ import annotations

import functools
import time

import torch

__all__ = ["CHOICES", "PAIR_DTYPES", "check_pair_dtypes", "cpu_prefers_bf16", "measure_matmul_flops", "model_device", "resolve_dtype_name"]

CHOICES = ("auto", "bf16", "bfloat16", "fp32", "float32")
PAIR_DTYPES = ("bf16", "fp32")  # the dtypes a benchmark compares covey and its baseline in, one pair each


def check_pair_dtypes(dtypes, name: str = "dtypes") -> tuple[str, ...]:
    """`dtypes` as a tuple when it holds distinct entries of PAIR_DTYPES (at least one), else ValueError."""
    out = tuple(dtypes)
    if not out or set(out) - set(PAIR_DTYPES) or len(set(out)) != len(out):
        raise ValueError(f"{name} takes distinct entries of {', '.join(PAIR_DTYPES)}, got {list(out)}")
    return out


def resolve_dtype_name(dtype: str, device: torch.device | str, hidden_size: int = 1024) -> str:
    """"bf16" or "fp32" for `dtype` ("auto", "bf16"/"bfloat16", "fp32"/"float32") on `device`."""
    if dtype not in CHOICES:
        raise ValueError(f"dtype must be one of {list(CHOICES)}, got {dtype!r}")
    if dtype != "auto":
        return "bf16" if dtype in ("bf16", "bfloat16") else "fp32"
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if device.type != "cpu":
        return "fp32"
    return "bf16" if cpu_prefers_bf16(int(hidden_size), torch.get_num_threads()) else "fp32"


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's first parameter (CPU for a model without parameters)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def measure_matmul_flops(hidden_size: int, rounds: int = 3, seconds: float = 0.008) -> dict[str, float]:
    """Best GFLOP/s of a [64, H] x [H, 4H] CPU matmul in bf16 and fp32 (alternating rounds)."""
    h = max(16, int(hidden_size))
    gen = torch.Generator(device="cpu").manual_seed(0)
    x32 = torch.randn(64, h, generator=gen, device="cpu")
    w32 = torch.randn(4 * h, h, generator=gen, device="cpu") * h**-0.5
    pairs = {"bf16": (x32.bfloat16(), w32.bfloat16()), "fp32": (x32, w32)}
    flop = 2.0 * 64 * h * 4 * h
    best = {k: 0.0 for k in pairs}
    with torch.inference_mode():
        for x, w in pairs.values():
            torch.nn.functional.linear(x, w)  # warm-up: kernel selection, page faults
        for _ in range(rounds):
            for name, (x, w) in pairs.items():
                calls, t0 = 0, time.perf_counter()
                while True:
                    torch.nn.functional.linear(x, w)
                    calls += 1
                    dt = time.perf_counter() - t0
                    if dt >= seconds:
                        break
                best[name] = max(best[name], flop * calls / dt / 1e9)
    return best


@functools.lru_cache(maxsize=None)
def cpu_prefers_bf16(hidden_size: int, threads: int, margin: float = 1.1) -> bool:
    """True when a bf16 matmul at this hidden size beats fp32 by `margin` on this CPU (cached)."""
    del threads  # part of the cache key: the answer can change with the thread count
    flops = measure_matmul_flops(hidden_size)
    return flops["bf16"] >= margin * flops["fp32"]
