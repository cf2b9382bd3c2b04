"""`triton_gate`: AutoTriton's rule-based structure check of a Triton kernel program (arXiv 2507.05687).

AutoTriton combines a rule-based reward with an execution-based one so that a program that does not
really use Triton (computes the result with PyTorch and merely defines a kernel) earns nothing.
Reconstructed: the paper's code was not reachable (searched 2026-11-24); the rule list is the spec's
design. The program is read, never run (`ast`):

    gate = 1 iff  the program parses, defines at least one @triton.jit function (any alias of triton / jit),
                  host code (anything outside the jit functions) launches one of them as kernel[grid](...),
                  and host code calls none of the denied operations (`deny`: torch.nn.functional.*,
                  torch.matmul / mm / bmm / einsum / conv*, ... through any import alias) nor uses `@`
    reward = gate (1.0 / 0.0); a completion without a ```python block scores 0.0

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

__all__ = ["DEFAULT_DENY", "TritonGate", "triton_structure"]

DEFAULT_DENY = (
    "torch.nn.functional.", "torch.matmul", "torch.mm", "torch.bmm", "torch.einsum", "torch.conv", "torch.addmm",
    "torch.baddbmm", "torch.softmax", "torch.log_softmax", "torch.layer_norm", "torch.Tensor.matmul",
)


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


def triton_structure(code: str, deny: tuple[str, ...] = DEFAULT_DENY) -> dict[str, bool]:
    """{parses, kernel, launch, denied}: the structure facts of a program (module docstring).

    >>> src = "import triton\\n@triton.jit\\ndef k(x): pass\\ndef run(x):\\n    k[(1,)](x)\\n    return x"
    >>> triton_structure(src)
    {'parses': True, 'kernel': True, 'launch': True, 'denied': False}
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return {"parses": False, "kernel": False, "launch": False, "denied": False}
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
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
    launch = denied = False
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id in kernels:
                launch = True
            name = _dotted(f, aliases)
            if name and any(name == d or name.startswith(d) for d in deny):
                denied = True
            if isinstance(f, ast.Attribute) and f.attr in ("matmul", "mm", "bmm", "einsum"):
                denied = True  # x.matmul(y) on a tensor
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            denied = True
    return {"parses": True, "kernel": bool(kernels), "launch": launch, "denied": denied}


@register_reward("triton_gate")
class TritonGate:
    """1.0 when the completion's program really launches a Triton kernel and leaves the work to it, else 0.0.

    deny: prefixes of host-code calls that compute the result in PyTorch (default `DEFAULT_DENY`); extra_deny
    adds to them.
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
