"""Run a PyTorch module program in the torch profile and compare its outputs with a reference's, on the host.

`run_module` starts `_tensor_harness.py` in the sandbox (`torch_profile.py`) and returns what it wrote as
data; `decode` turns one encoded value into numpy arrays (`TensorArray`: the array and its torch dtype) /
plain values with strict checks (a value the harness cannot have written is refused); `compare` is the verdict,
taken here and never in the sandbox. Correctness follows KernelBench's `run_and_check_correctness`: the same
shape and dtype (``torch.allclose`` refuses two dtypes), then ``torch.allclose(out, ref, atol, rtol)``
(|out - ref| <= atol + rtol * |ref| elementwise; NaN never passes). The channel is written by the program under
test: a line that does not parse (deep nesting, a 5,000-digit integer) or a value out of range is an error of
that run, never an exception here.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._process import execute
from .limits import RunResult, SandboxLimits
from .torch_profile import TORCH_LIMITS, torch_profile

__all__ = ["ModuleRun", "TensorArray", "compare", "decode", "run_module"]

_HARNESS = (Path(__file__).parent / "_tensor_harness.py").read_bytes()
_KINDS = "fiub"  # float, int, unsigned, bool arrays; nothing else is accepted from the sandbox
_MAX_DEPTH = 8


@dataclass
class ModuleRun:
    """What one harness run reported: records by trial, the init record (reference mode), the first error."""

    records: list[dict] = field(default_factory=list)
    init: dict | None = None
    error: str | None = None
    run: RunResult | None = None

    @property
    def timed_out(self) -> bool:
        return self.run is not None and self.run.timed_out


def run_module(program: str, mode: str, seeds: list[int], *, init: dict | None = None, inputs: list[dict] | None = None,
               limits: SandboxLimits = TORCH_LIMITS, allow_unsandboxed: bool | None = None,
               trace: bool = False) -> ModuleRun:  # fmt: skip
    """Run `program` (``Model`` + ``get_inputs`` in reference mode, ``ModelNew`` in candidate mode) in the sandbox.
    With `trace` (candidate mode), each record carries the forward's trace (`_tensor_harness.py`)."""
    if mode not in ("reference", "candidate"):
        raise ValueError(f"mode must be 'reference' or 'candidate', got {mode!r}")
    spec = {"mode": mode, "seeds": list(seeds), "init": init, "inputs": inputs, "trace": bool(trace)}
    res = execute(["tensor_harness.py"], {"tensor_harness.py": _HARNESS, "program.py": program.encode("utf-8")},
                  json.dumps(spec).encode(), limits, channel=True, allow_unsandboxed=allow_unsandboxed,
                  profile=torch_profile())
    out = ModuleRun(run=res)
    complete = res.channel[: res.channel.rfind(b"\n") + 1]  # a partial last line: cut off while writing
    for line in complete.splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # also a 4,300+ digit integer, or nesting past the recursion limit
            out.error = "the result channel carried a line that is not JSON (or nests too deep, or a huge number)"
            return out
        if not isinstance(rec, dict):
            out.error = "the result channel carried a record that is not an object"
            return out
        if "error" in rec:
            out.error = str(rec["error"])[:500]
            return out
        if "init" in rec and mode == "reference" and out.init is None and not out.records:
            out.init = rec["init"]
        elif rec.get("i") == len(out.records) and "out" in rec and len(out.records) < len(seeds) \
                and (not trace or "trace" in rec):
            out.records.append(rec)
        else:
            out.error = f"the result channel carried an unexpected record (line {len(out.records) + 1})"
            return out
    if len(out.records) < len(seeds):
        if res.timed_out:
            out.error = f"timed out after {res.elapsed_s:.1f} s ({len(out.records)} of {len(seeds)} trials done)"
        else:
            why = res.limit_hit or f"exit {res.exit_code}"
            out.error = f"the program stopped ({why}) after {len(out.records)} of {len(seeds)} trials: " \
                        f"{res.stderr.strip()[-300:]}"
    return out


class TensorArray(np.ndarray):
    """A decoded tensor: its values as a numpy array, and the torch dtype it had (``torch_dtype``, e.g.
    ``"torch.bfloat16"``, which travels as float32)."""

    torch_dtype = ""

    def __array_finalize__(self, obj):
        self.torch_dtype = getattr(obj, "torch_dtype", "")


def decode(e, depth: int = 0):
    """An encoded value (`_tensor_harness.py`) as `TensorArray` s, plain values and lists; ValueError if malformed.

    >>> v = decode({"l": [{"v": 3}, {"t": "<f4", "d": "torch.float32", "s": [2], "b": "AACAPwAAAEA="}]})
    >>> v[0], v[1].tolist(), v[1].dtype, v[1].torch_dtype
    (3, [1.0, 2.0], dtype('float32'), 'torch.float32')
    """
    if depth > _MAX_DEPTH or not isinstance(e, dict):
        raise ValueError("malformed value")
    if set(e) == {"l"} and isinstance(e["l"], list):
        return [decode(v, depth + 1) for v in e["l"]]
    if set(e) == {"v"}:
        v = e["v"]
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise ValueError("malformed plain value")
    if set(e) != {"t", "d", "s", "b"}:
        raise ValueError("malformed value")
    try:
        dtype = np.dtype(e["t"])
    except TypeError as err:
        raise ValueError(f"unknown dtype {e['t']!r}") from err
    shape = e["s"]
    if dtype.kind not in _KINDS or not isinstance(shape, list) or len(shape) > 32 or \
            not all(type(n) is int and 0 <= n < 2**40 for n in shape):
        raise ValueError(f"malformed tensor (dtype {dtype}, shape {str(shape)[:80]})")
    if not isinstance(e["d"], str) or not e["d"].startswith("torch.") or len(e["d"]) > 40:
        raise ValueError(f"malformed torch dtype {str(e['d'])[:40]!r}")
    try:
        raw = base64.b64decode(e["b"], validate=True)
    except (binascii.Error, TypeError) as err:
        raise ValueError("malformed tensor bytes") from err
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"tensor bytes ({len(raw)}) do not match shape {shape} of {dtype}")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape).view(TensorArray)
    arr.torch_dtype = e["d"]
    return arr


def compare(out, ref, atol: float, rtol: float, path: str = "output") -> str | None:
    """None when `out` matches `ref` (decoded values), else why not.

    >>> import numpy as np
    >>> compare(np.array([1.0, 2.0]), np.array([1.0, 2.005]), 1e-2, 1e-2) is None
    True
    >>> compare(np.array([1.0, 2.5]), np.array([1.0, 2.0]), 1e-2, 1e-2)
    'output: values differ (max abs diff 0.5 at index 1)'
    """
    if isinstance(ref, np.ndarray):
        if not isinstance(out, np.ndarray):
            return f"{path}: expected a tensor, got {type(out).__name__}"
        if out.shape != ref.shape:
            return f"{path}: shape {list(out.shape)} != expected {list(ref.shape)}"
        want, got = getattr(ref, "torch_dtype", "") or str(ref.dtype), getattr(out, "torch_dtype", "") or str(out.dtype)
        if got != want:
            return f"{path}: dtype {got} != expected {want}"
        a, b = out.astype(np.float64), ref.astype(np.float64)
        if a.size == 0:
            return None
        ok = np.abs(a - b) <= atol + rtol * np.abs(b)  # NaN compares False: never a pass
        if ok.all():
            return None
        diff = np.where(np.isnan(a) | np.isnan(b), np.inf, np.abs(a - b))
        at = int(np.argmax(np.where(ok, -1.0, diff)))
        worst = "nan" if np.isnan(a.flat[at]) or np.isnan(b.flat[at]) else f"{diff.flat[at]:.3g}"
        index = ", ".join(map(str, np.unravel_index(at, a.shape)))
        return f"{path}: values differ (max abs diff {worst} at index {index})"
    if isinstance(ref, list):
        if not isinstance(out, list) or len(out) != len(ref):
            return f"{path}: expected a sequence of {len(ref)}, got {type(out).__name__}" + \
                   (f" of {len(out)}" if isinstance(out, list) else "")
        for i, (o, r) in enumerate(zip(out, ref)):
            why = compare(o, r, atol, rtol, f"{path}[{i}]")
            if why:
                return why
        return None
    if isinstance(out, (np.ndarray, list)) or type(out) is not type(ref) and not (
            isinstance(out, (int, float)) and isinstance(ref, (int, float))):
        return f"{path}: expected {type(ref).__name__}, got {type(out).__name__}"
    if isinstance(ref, float) or isinstance(out, float):
        try:
            a, b = float(out), float(ref)  # a 1,000-digit integer against a float: too large, a mismatch
        except OverflowError:
            return f"{path}: {str(out)[:40]} is out of range"
        return None if abs(a - b) <= atol + rtol * abs(b) else f"{path}: {out!r} != {ref!r}"
    return None if out == ref else f"{path}: {str(out)[:40]} != {str(ref)[:40]}"
