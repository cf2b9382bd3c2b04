"""`triton_gate`: AutoTriton's rule-based structure check of a Triton kernel program (arXiv 2507.05687).

AutoTriton combines a rule-based reward with an execution-based one so that a program that does not
really use Triton (computes the result with PyTorch and merely defines a kernel) earns nothing.
Reconstructed: the paper's code was not reachable (searched 2026-11-24); the rule list is the spec's
design. The program is read, never run (`ast`):

    gate = 1 iff  the program parses, defines at least one @triton.jit function (any alias of triton / jit),
                  host code (anything outside the jit functions) launches one of them as kernel[grid](...),
                  and host code calls none of the denied operations (`deny`: torch.nn.functional.*,
                  torch.matmul / mm / bmm / einsum / tensordot / linalg.* / conv*, ... through any import alias,
                  also as getattr(torch, "matmul")), names no matmul dunder (x.__matmul__), does not use `@`,
                  and calls none of the dynamic routes (`DYNAMIC`: eval, exec, compile, __import__, getattr with a
                  name that is not a constant, importlib, ctypes, threads) nor names torch's dispatch internals
    reward = gate (1.0 / 0.0); a completion without a ```python block scores 0.0

Reading text cannot see what a program does at run time: a module's forward (``self.fc(x)`` with an
``nn.Linear``; constructing one to hold weights is allowed, as KernelBench's programs do to match the
reference's initialisation), a name assembled at run time. `triton_exec` decides its gate at run time as well:
the candidate runs under a recorder of every aten op (`RUNTIME_ALLOW`, `runtime_gate`). Use `triton_exec`
to train; this reward alone is a first filter.

Metrics: ``no_kernel_frac``, ``no_launch_frac``, ``denied_op_frac`` (among programs that parse), and
``parse_error_frac``. The execution half (the kernel's outputs against the reference PyTorch module under
``TRITON_INTERPRET=1``, times this gate) is `triton_exec`.
"""

from __future__ import annotations

import ast

from covey.rewards._scoring import RewardOutput
from covey.rewards.code import extract_code
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["DEFAULT_DENY", "DYNAMIC", "RUNTIME_ALLOW", "TritonGate", "runtime_gate", "triton_structure"]

DEFAULT_DENY = (
    "torch.nn.functional.", "torch.matmul", "torch.mm", "torch.bmm", "torch.einsum", "torch.conv", "torch.addmm",
    "torch.baddbmm", "torch.softmax", "torch.log_softmax", "torch.layer_norm", "torch.Tensor.matmul",
    "torch.tensordot", "torch.linalg.", "torch.inner", "torch.outer", "torch.dot", "torch.vdot", "torch.mv",
    "torch.chain_matmul", "torch.kron", "torch.cdist", "torch.special.softmax", "torch.special.log_softmax",
)
# calls that reach code the text does not show: refused wherever they appear in host code
DYNAMIC = (
    "eval", "exec", "compile", "__import__", "globals", "vars", "importlib.", "ctypes.", "threading.", "_thread.",
    "multiprocessing.", "concurrent.", "os.fork", "torch.utils._python_dispatch.", "torch._C.", "torch.library.",
)
_DUNDERS = {"__matmul__", "__rmatmul__", "__imatmul__"}
_METHODS = {"matmul", "mm", "bmm", "einsum", "tensordot"}  # x.matmul(y) on a tensor
_INTERNALS = {"_python_dispatch", "_disable_current_modes", "_pop_mode", "_push_mode", "_C", "__torch_dispatch__",
              "__torch_function__", "_DisableTorchDispatch"}

# aten ops (overload packet names) a ModelNew's forward may run outside Triton kernels: allocation, views,
# copies and metadata, never arithmetic. Everything else a forward runs fails the run-time gate.
RUNTIME_ALLOW = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "arange", "scalar_tensor",
    "lift_fresh", "view", "_unsafe_view", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand",
    "squeeze", "unsqueeze", "select", "slice", "detach", "alias", "split", "split_with_sizes", "unbind", "view_as",
    "clone", "copy_", "_to_copy", "set_", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_contiguous", "_local_scalar_dense", "resize_", "contiguous",
})


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """'torch.nn.functional.relu' for F.relu (with F an alias of torch.nn.functional), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _call_name(node: ast.Call, aliases: dict[str, str]) -> str | None:
    """The dotted name a call reaches, also through ``getattr(obj, "name")`` with a constant name."""
    f = node.func
    if isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) >= 2:
        obj, attr = _dotted(node.args[0], aliases), node.args[1]
        if obj is not None and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
            return f"{obj}.{attr.value}"
    return _dotted(f, aliases)


def _denied(name: str | None, deny: tuple[str, ...]) -> bool:
    return bool(name) and any(name == d or name.startswith(d) for d in deny)


def triton_structure(code: str, deny: tuple[str, ...] = DEFAULT_DENY) -> dict[str, bool]:
    """{parses, kernel, launch, denied}: the structure facts of a program (module docstring).

    >>> src = "import triton\\n@triton.jit\\ndef k(x): pass\\ndef run(x):\\n    k[(1,)](x)\\n    return x"
    >>> triton_structure(src)
    {'parses': True, 'kernel': True, 'launch': True, 'denied': False}
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {"parses": False, "kernel": False, "launch": False, "denied": False}
    aliases: dict[str, str] = {}
    denied = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                denied |= _denied(a.name + ".", DYNAMIC)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                denied |= _denied(f"{node.module}.{a.name}", DYNAMIC) or _denied(node.module + ".", DYNAMIC)
    kernels, kernel_nodes = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                name = _dotted(target, aliases)
                if name in ("triton.jit", "triton.autotune", "triton.heuristics"):
                    kernels.add(node.name)
                    kernel_nodes.add(id(node))
    inside: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in kernel_nodes:
            inside.update(id(n) for n in ast.walk(node))
    launch = False
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id in kernels:
                launch = True
            name = _call_name(node, aliases)
            denied |= _denied(name, deny) or _denied(name, DYNAMIC)
            if isinstance(f, ast.Name) and f.id == "getattr" and not (
                    len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                denied = True  # getattr(torch, name) with a name made at run time
            if isinstance(f, ast.Attribute) and f.attr in _DUNDERS | _METHODS:
                denied = True  # x.matmul(y), x.__matmul__(y)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            denied = True
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            denied = True
        elif isinstance(node, ast.Attribute) and node.attr in _INTERNALS | _DUNDERS:
            denied = True  # torch._C..., x.__matmul__ taken as a value
        elif isinstance(node, ast.Name) and node.id in ("eval", "exec", "__import__"):
            denied = True  # f = eval; f("...")
    return {"parses": True, "kernel": bool(kernels), "launch": launch, "denied": denied}


def runtime_gate(trace, allow: frozenset[str] = RUNTIME_ALLOW) -> str | None:
    """None when a run's trace shows a Triton launch and only allowed aten ops, else why not.

    `trace` is what the tensor harness recorded during one forward: ``{"ops": {aten op: count}, "launches": n}``
    (ops named ``host:...`` are reads of tensor data into Python / NumPy and threads started; ``tamper:...``
    means the recorder was found removed).

    >>> runtime_gate({"ops": {"empty_like": 1}, "launches": 1}) is None
    True
    >>> runtime_gate({"ops": {"addmm": 1, "empty_like": 1}, "launches": 1})
    'PyTorch did work outside Triton kernels: addmm x1'
    """
    if not isinstance(trace, dict) or not isinstance(trace.get("ops"), dict) or type(trace.get("launches")) is not int:
        return "the run reported no trace of its operations"
    ops = trace["ops"]
    if not all(isinstance(k, str) and type(v) is int for k, v in ops.items()):
        return "the run reported a malformed trace"
    bad = sorted(k for k in ops if k not in allow)
    if bad:
        return "PyTorch did work outside Triton kernels: " + ", ".join(f"{k[:40]} x{ops[k]}" for k in bad[:6])
    if trace["launches"] < 1:
        return "no Triton kernel was launched"
    return None


@register_reward("triton_gate")
class TritonGate:
    """1.0 when the completion's program really launches a Triton kernel and leaves the work to it, else 0.0.

    deny: prefixes of host-code calls that compute the result in PyTorch (default `DEFAULT_DENY`); extra_deny
    adds to them. A static check: `triton_exec` also decides its gate at run time.
    """

    def __init__(self, deny: list[str] | None = None, extra_deny: list[str] | None = None):
        self.deny = tuple(deny if deny is not None else DEFAULT_DENY) + tuple(extra_deny or ())
        self.__name__ = "triton_gate"

    def __call__(self, prompts, completions, **_) -> RewardOutput:
        scores, facts = [], []
        for c in completions:
            code = extract_code(completion_text(c))
            f = triton_structure(code, self.deny) if code is not None else None
            facts.append(f)
            scores.append(float(f is not None and f["kernel"] and f["launch"] and not f["denied"]))
        parsed = [f for f in facts if f is not None and f["parses"]]
        metrics = {"parse_error_frac": [float(f is None or not f["parses"]) for f in facts]}
        if parsed:
            metrics.update(no_kernel_frac=[float(not f["kernel"]) for f in parsed],
                           no_launch_frac=[float(not f["launch"]) for f in parsed],
                           denied_op_frac=[float(f["denied"]) for f in parsed])
        return RewardOutput(scores, metrics)
