"""triton_gate: AutoTriton-style structure check of kernel programs (read with ast, never run)."""

import pytest

from covey.rewards import get_reward
from covey.rewards.triton_gate import RUNTIME_ALLOW, runtime_gate, triton_structure

GOOD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))

    def forward(self, x, y):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK=32)
        return out
'''


def block(code):
    return f"Here is the kernel:\n```python\n{code}\n```"


@pytest.mark.parametrize(("code", "facts"), [
    (GOOD, (True, True, False)),
    (GOOD.replace("return out", "return torch.matmul(x, y)"), (True, True, True)),  # the hack: torch does the work
    (GOOD.replace("        add_kernel[", "        # add_kernel["), (True, False, False)),  # defined, never launched
    (GOOD.replace("@triton.jit\n", ""), (False, False, False)),  # no kernel: the launch is not of a jit function
    ("import torch.nn.functional as F\n" + GOOD.replace("return out", "return F.relu(out)"), (True, True, True)),
    ("from torch.nn import functional as fn\n" + GOOD.replace("return out", "return fn.gelu(out)"), (True, True, True)),
    (GOOD.replace("return out", "return x @ y"), (True, True, True)),
    (GOOD.replace("return out", "return out.matmul(y)"), (True, True, True)),
    (GOOD.replace("import triton\n", "from triton import jit\nimport triton\n").replace("@triton.jit", "@jit"), (True, True, False)),
])
def test_structure_facts(code, facts):
    f = triton_structure(code)
    assert f["parses"] and (f["kernel"], f["launch"], f["denied"]) == facts


def test_tl_ops_inside_the_kernel_are_allowed_and_the_reward():
    inside = GOOD.replace("tl.store(out_ptr", "acc = tl.dot(x_ptr, y_ptr)\n    tl.store(out_ptr")
    reward = get_reward("triton_gate")
    out = reward(prompts=["p"] * 5, completions=[block(GOOD), block(inside), block(GOOD.replace("return out", "return torch.mm(x, y)")),
                                                  "no code at all", block("def broken(:\n")])
    assert out.scores == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert out.metrics["parse_error_frac"] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert out.metrics["denied_op_frac"] == [0.0, 0.0, 1.0]
    custom = get_reward("triton_gate", extra_deny=["torch.empty_like"])
    assert custom(prompts=["p"], completions=[block(GOOD)]).scores == [0.0]


@pytest.mark.parametrize("ret", [
    'getattr(torch, "matmul")(x, y)',  # a constant name is read like torch.matmul
    "getattr(torch, name)(x, y)",  # a name made at run time
    "x.__matmul__(y)",
    "torch.tensordot(x, y, dims=1)",
    "torch.linalg.matmul(x, y)",
    'eval("x @ y")',
    'exec("out = x")',
    "__import__('torch').mm(x, y)",
    "torch._C._VariableFunctions.mm(x, y)",
    "torch.utils._python_dispatch._disable_current_modes()",
])
def test_routes_around_the_deny_list_are_denied(ret):
    assert triton_structure(GOOD.replace("return out", f"return {ret}"))["denied"]


@pytest.mark.parametrize("head", ["import threading", "import ctypes", "from concurrent.futures import ThreadPoolExecutor",
                                  "import torch.library"])
def test_modules_that_hide_work_from_the_run_time_recorder_are_denied(head):
    assert triton_structure(head + "\n" + GOOD)["denied"]


def test_modules_held_for_their_weights_pass_the_static_check():
    # KernelBench programs build nn.Linear to get the reference's initialisation; calling it is caught at run time
    held = GOOD.replace("self.w = torch.nn.Parameter(torch.ones(4))", "self.fc = torch.nn.Linear(4, 4)")
    assert triton_structure(held) == {"parses": True, "kernel": True, "launch": True, "denied": False}
    assert not triton_structure("x = (" * 200 + ")" * 200)["parses"]  # nesting the parser refuses: no exception


def test_runtime_gate_reads_the_trace():
    assert runtime_gate({"ops": {"empty_like": 1, "view": 2, "_to_copy": 1}, "launches": 2}) is None
    assert runtime_gate({"ops": {"mm": 1, "host:numpy": 1}, "launches": 1}) == \
        "PyTorch did work outside Triton kernels: host:numpy x1, mm x1"
    assert runtime_gate({"ops": {}, "launches": 0}) == "no Triton kernel was launched"
    assert runtime_gate({"ops": {"tamper:dispatch_mode": 1}, "launches": 1}).endswith("tamper:dispatch_mode x1")
    assert runtime_gate({"ops": {"mylib::empty": 1}, "launches": 1}) is not None  # other namespaces never allowed
    assert runtime_gate({"ops": {"cat": 1}, "launches": 1}, RUNTIME_ALLOW | {"cat"}) is None
    for bad in (None, {"ops": [], "launches": 1}, {"ops": {"x": "1"}, "launches": 1}, {"ops": {}, "launches": True}):
        assert runtime_gate(bad) is not None
