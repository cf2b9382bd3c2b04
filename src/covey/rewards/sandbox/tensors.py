"""Run a PyTorch module program in the torch profile and compare its outputs with a reference's, on the host.

`run_module` starts `_tensor_harness.py` in the sandbox (`torch_profile.py`) and returns what it wrote as
data; `decode` turns one encoded value into numpy arrays / plain values with strict checks (a value the
harness cannot have written is refused); `compare` is the verdict, taken here and never in the sandbox.
Correctness follows KernelBench's `run_and_check_correctness`: the same shape, then
``torch.allclose(out, ref, atol, rtol)`` (|out - ref| <= atol + rtol * |ref| elementwise; NaN never passes).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ._process import execute
from .limits import RunResult, SandboxLimits
from .torch_profile import TORCH_LIMITS, torch_profile

__all__ = ["ModuleRun", "compare", "decode", "run_module"]

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
               limits: SandboxLimits = TORCH_LIMITS, allow_unsandboxed: bool | None = None) -> ModuleRun:
    """Run `program` (``Model`` + ``get_inputs`` in reference mode, ``ModelNew`` in candidate mode) in the sandbox."""
    if mode not in ("reference", "candidate"):
        raise ValueError(f"mode must be 'reference' or 'candidate', got {mode!r}")
    spec = {"mode": mode, "seeds": list(seeds), "init": init, "inputs": inputs}
    res = execute(["tensor_harness.py"], {"tensor_harness.py": _HARNESS, "program.py": program.encode("utf-8")},
                  json.dumps(spec).encode(), limits, channel=True, allow_unsandboxed=allow_unsandboxed,
                  profile=torch_profile())
    out = ModuleRun(run=res)
    complete = res.channel[: res.channel.rfind(b"\n") + 1]  # a partial last line: cut off while writing
    for line in complete.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            out.error = "the result channel carried a line that is not JSON"
            return out
        if not isinstance(rec, dict):
            out.error = "the result channel carried a record that is not an object"
            return out
        if "error" in rec:
            out.error = str(rec["error"])[:500]
            return out
        if "init" in rec and mode == "reference" and out.init is None and not out.records:
            out.init = rec["init"]
        elif rec.get("i") == len(out.records) and "out" in rec and len(out.records) < len(seeds):
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


def decode(e, depth: int = 0):
    """An encoded value (`_tensor_harness.py`) as numpy arrays, plain values and lists; ValueError if malformed.

    >>> decode({"l": [{"v": 3}, {"t": "<f4", "d": "torch.float32", "s": [2], "b": "AACAPwAAAEA="}]})
    [3, array([1., 2.], dtype=float32)]
    """
    import numpy as np

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
    if dtype.kind not in _KINDS or not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"malformed tensor (dtype {dtype}, shape {shape!r})")
    try:
        raw = base64.b64decode(e["b"], validate=True)
    except (binascii.Error, TypeError) as err:
        raise ValueError("malformed tensor bytes") from err
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"tensor bytes ({len(raw)}) do not match shape {shape} of {dtype}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def compare(out, ref, atol: float, rtol: float, path: str = "output") -> str | None:
    """None when `out` matches `ref` (decoded values), else why not.

    >>> import numpy as np
    >>> compare(np.array([1.0, 2.0]), np.array([1.0, 2.005]), 1e-2, 1e-2) is None
    True
    >>> compare(np.array([1.0, 2.5]), np.array([1.0, 2.0]), 1e-2, 1e-2)
    'output: values differ (max abs diff 0.5 at index 1)'
    """
    import numpy as np

    if isinstance(ref, np.ndarray):
        if not isinstance(out, np.ndarray):
            return f"{path}: expected a tensor, got {type(out).__name__}"
        if out.shape != ref.shape:
            return f"{path}: shape {list(out.shape)} != expected {list(ref.shape)}"
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
        return None if abs(out - ref) <= atol + rtol * abs(ref) else f"{path}: {out!r} != {ref!r}"
    return None if out == ref else f"{path}: {out!r} != {ref!r}"
