"""Runs inside the torch sandbox profile: one PyTorch module program, its outputs written back as data.

Not trusted for any verdict: it reports tensors, the host (`covey.rewards.triton_exec`) compares them.
Spec on stdin (JSON): ``{"mode": "reference" | "candidate", "seeds": [...], "init": enc, "inputs": [enc, ...],
"trace": bool}``.
The program is ``program.py`` in the working directory, imported as a module (Triton reads kernel source
with `inspect`). The result descriptor's number is the last argument; one JSON line per record:

- reference mode: ``{"init": enc}`` (``get_init_inputs()``), then per seed k ``{"i": k, "inputs": enc, "out": enc}``:
  ``torch.manual_seed(seed)``, ``get_inputs()``, then the outputs of ``Model(*init)`` on them;
- candidate mode: per seed k ``{"i": k, "out": enc}``: ``ModelNew(*init)`` on the inputs the host sent; with
  ``trace``, also ``"trace": {"ops": {aten op: count}, "launches": n}``: every aten op the forward ran (a
  `TorchDispatchMode`, kernel bodies under the interpreter included), reads of tensor data into Python
  (``host:numpy`` ...) and threads started (``host:thread``), and Triton kernel launches; a recorder found
  removed after the forward adds ``tamper:...``. The host decides what is allowed (`triton_gate.runtime_gate`).

Both construct the model right after ``torch.manual_seed(42)`` (KernelBench's order, so a module that creates
the same parameters in the same order gets the same weights) and run it under ``torch.no_grad()``. The first
failure ends the run with ``{"i": k, "error": "..."}``. ``enc`` is tagged JSON: a tensor is
``{"t": numpy dtype str, "d": torch dtype, "s": shape, "b": base64 bytes}`` (bfloat16 travels as float32),
``{"v": x}`` a number / bool / str / None, ``{"l": [...]}`` a list or tuple.
"""

import base64
import importlib.util
import json
import os
import sys
import traceback


def _enc(x, torch, depth=0):
    if depth > 8:
        raise TypeError("outputs nested deeper than 8 levels")
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        d = str(t.dtype)
        if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            t = t.float()
        a = t.contiguous().numpy()
        return {"t": a.dtype.str, "d": d, "s": list(a.shape), "b": base64.b64encode(a.tobytes()).decode()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return {"v": x}
    if isinstance(x, (list, tuple)):
        return {"l": [_enc(v, torch, depth + 1) for v in x]}
    raise TypeError(f"a value of type {type(x).__name__} is neither a tensor, a number nor a list of them")


def _dec(e, torch, np):
    if "l" in e:
        return [_dec(v, torch, np) for v in e["l"]]
    if "v" in e:
        return e["v"]
    a = np.frombuffer(base64.b64decode(e["b"]), dtype=np.dtype(e["t"])).reshape(e["s"]).copy()
    t = torch.from_numpy(a)
    dtype = getattr(torch, e["d"].removeprefix("torch."), None)
    return t.to(dtype) if isinstance(dtype, torch.dtype) and dtype != t.dtype else t


class _Trace:
    """Records what one forward does (see the module docstring); on only while `active`."""

    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.torch, self.ops, self.launches, self.active = torch, {}, 0, False
        self.probing = self.probed = False
        trace = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if trace.probing:
                    trace.probed = True
                elif trace.active:  # ops of other namespaces (torch.library) keep theirs: never an allowed name
                    name = func.overloadpacket.__name__
                    trace.count(name if func.namespace == "aten" else f"{func.namespace}::{name}")
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.patched = []
        for name in ("numpy", "__array__", "tolist", "__dlpack__"):
            self._wrap(torch.Tensor, name, "host:" + name)
        import threading

        self._wrap(threading.Thread, "start", "host:thread")
        try:  # the launch paths: a jit function (compiled) and the interpreter's (TRITON_INTERPRET=1)
            from triton.runtime import interpreter, jit

            for cls in (interpreter.InterpretedFunction, jit.JITFunction):
                self._wrap(cls, "run", None)
        except ImportError:
            pass

    def count(self, name):
        self.ops[name] = self.ops.get(name, 0) + 1

    def _wrap(self, cls, name, op):
        orig = getattr(cls, name)
        trace = self

        def wrapper(*args, **kwargs):
            if trace.active:
                if op is None:
                    trace.launches += 1
                else:
                    trace.count(op)
            return orig(*args, **kwargs)

        setattr(cls, name, wrapper)
        self.patched.append((cls, name, wrapper))

    def forward(self, model, inputs):
        self.ops, self.launches, self.active = {}, 0, True
        self.mode.__enter__()
        try:
            y = model(*inputs)
            self.probing, self.probed = True, False  # does the recorder still see ops? (a mode removed, or dispatch
            self.torch.empty(0)  # to Python modes disabled, during the forward and left so)
            if not self.probed:
                self.count("tamper:dispatch_mode")
        finally:
            self.active = self.probing = False
            try:
                self.mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the stack was changed under it
                self.count("tamper:dispatch_stack")
        for cls, name, wrapper in self.patched:
            if getattr(cls, name) is not wrapper:
                self.count(f"tamper:{cls.__name__}.{name}")
        return y, {"ops": dict(self.ops), "launches": self.launches}


def _why(e):
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"program.py:{f.lineno}" for f in reversed(tb) if f.filename.endswith("program.py")), "")
    return f"{type(e).__name__}: {e}"[:400] + (f" ({where})" if where else "")


def main():
    out = os.fdopen(int(sys.argv[-1]), "wb", buffering=0)

    def emit(rec):
        out.write((json.dumps(rec) + "\n").encode())

    spec = json.loads(sys.stdin.buffer.read())
    import numpy as np
    import torch

    torch.set_num_threads(1)
    trace = _Trace(torch) if spec.get("trace") else None
    step = "load"
    k = 0
    try:
        loader = importlib.util.spec_from_file_location("program", os.path.join(os.getcwd(), "program.py"))
        mod = importlib.util.module_from_spec(loader)
        sys.modules["program"] = mod
        loader.loader.exec_module(mod)
        step = "init"
        if spec["mode"] == "reference":
            init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
            emit({"init": _enc(init, torch)})
            cls = mod.Model
        else:
            init = _dec(spec["init"], torch, np)
            cls = getattr(mod, "ModelNew", None)
            if cls is None:
                raise NameError("the program defines no ModelNew")
        torch.manual_seed(42)
        model = cls(*init)
        for k, seed in enumerate(spec["seeds"]):
            if spec["mode"] == "reference":
                step = "get_inputs"
                torch.manual_seed(seed)
                inputs = list(mod.get_inputs())
                rec = {"i": k, "inputs": _enc(inputs, torch)}
            else:
                inputs = _dec(spec["inputs"][k], torch, np)
                rec = {"i": k}
            step = "forward"
            torch.manual_seed(seed)
            with torch.no_grad():
                if trace is None:
                    y = model(*inputs)
                else:
                    y, rec["trace"] = trace.forward(model, inputs)
            step = "output"
            rec["out"] = _enc(y, torch)
            emit(rec)
    except BaseException as e:  # noqa: BLE001 - every failure is reported as data, the host decides
        emit({"i": k, "error": f"{step}: {_why(e)}"})


main()
