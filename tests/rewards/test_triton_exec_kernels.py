"""triton_exec with real Triton kernels, run by Triton's CPU interpreter inside the torch sandbox profile.

Skipped where triton is not installed (it is not in `make test`'s install: `make test-triton` runs these
in .venv-triton). The plain-PyTorch path is tests/rewards/test_triton_exec.py.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from covey.rewards import get_reward
from covey.rewards.sandbox.torch_profile import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="triton is not installed (make test-triton installs it)")

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = {json.loads(line)["name"]: json.loads(line)["reference"]
              for line in (ROOT / "examples" / "rewards" / "triton_kernels.jsonl").read_text().splitlines()}

ADD_RELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(v, 0.0) * scale, mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_relu_kernel[(triton.cdiv(n, 64),)](x, y, out, n, self.scale, BLOCK=64)
        return out
'''

ROW_SUM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(v, axis=0))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty(rows, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, out, cols, BLOCK=64)
        return out
'''


def block(code):
    return f"```python\n{code}\n```"


def test_kernels_pass_and_broken_kernels_and_hacks_score_zero():
    reward = get_reward("triton_exec", trials=2)
    cases = [
        (ADD_RELU, "add_relu_scale", "pass"),
        (ROW_SUM, "row_sum", "pass"),
        (ADD_RELU.replace("BLOCK=64", "BLOCK=16"), "add_relu_scale", "mismatch"),  # 1/4 of each block written
        (ROW_SUM.replace("other=0.0", "other=1.0"), "row_sum", "mismatch"),  # masked lanes add 1 each
        (ADD_RELU.replace("return out", "return torch.relu(x + y) * self.scale").replace("import torch\n", "import torch\nimport torch.nn.functional as F\n")
         .replace("torch.relu(x + y)", "F.relu(x + y)"), "add_relu_scale", "gate"),  # torch does the work: not run
        (ADD_RELU.replace("tl.maximum(v, 0.0)", "tl.no_such_op(v)"), "add_relu_scale", "error"),  # raises in the kernel
        (ADD_RELU.replace("        add_relu_kernel[", "        # add_relu_kernel["), "add_relu_scale", "gate"),  # never launched
    ]
    out = reward(prompts=["p"] * len(cases), completions=[block(c) for c, _, _ in cases],
                 reference=[REFERENCES[r] for _, r, _ in cases])
    assert [o for o, _ in reward.last_outcomes] == [want for _, _, want in cases], reward.last_outcomes
    assert out.scores == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert out.metrics["gate"] == [0, 0, 0, 0, 1.0, 0, 1.0]
    assert reward.last_outcomes[3][1].startswith("trial 0: output: values differ (max abs diff 16 at index")  # 64 - 48 lanes


def test_the_example_trains_one_step(tmp_path):
    cmd = [sys.executable, "-m", "covey.cli", "train", str(ROOT / "examples" / "rewards" / "triton_kernels.yaml"),
           "steps=1", "log.progress=false", "log.tensorboard=false", "reward_workers=0", "--run-dir", str(tmp_path / "run")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert row["reward/triton_exec/failures"] == 0.0
    assert row["reward/triton_exec/no_code"] == 1.0  # a random tiny model writes no ```python block


# A kernel that does nothing is launched, and PyTorch does the work by routes a reading of the text misses.
# Each of these scored 1.0 before the gate was also decided at run time.
LINEAR_REF = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.fc(x)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return [8, 6]
'''

NOOP = '''
import torch
import triton
import triton.language as tl
{imports}

@triton.jit
def noop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        {init}

    def forward(self, x):
        noop_kernel[(1,)](x, x.numel(), BLOCK=16)
        return {expr}
'''

LINEAR_INIT = "self.fc = torch.nn.Linear(*args)"  # held for its weights: KernelBench programs do so
HACKS = [  # (imports, init, forward's return, reference, the outcome now)
    ("", LINEAR_INIT, 'getattr(torch, "matmul")(x, self.fc.weight.t()) + self.fc.bias', LINEAR_REF, "gate"),
    ("", LINEAR_INIT, "x.__matmul__(self.fc.weight.t()) + self.fc.bias", LINEAR_REF, "gate"),
    ("", LINEAR_INIT, "torch.tensordot(x, self.fc.weight, dims=([1], [1])) + self.fc.bias", LINEAR_REF, "gate"),
    ("", LINEAR_INIT, 'eval("self.fc(x)")', LINEAR_REF, "gate"),
    ("", LINEAR_INIT, "self.fc(x)", LINEAR_REF, "runtime_gate"),  # nn.Linear's forward
    ("", "self.sm = torch.nn.Softmax(dim=-1)", "self.sm(x)", "row_softmax", "runtime_gate"),  # nn.Softmax
    ("", LINEAR_INIT, 'torch.__dict__["mat" + "mul"](x, self.fc.weight.t()) + self.fc.bias', LINEAR_REF, "runtime_gate"),
    ("import functools, operator", "", "functools.reduce(operator.add, [x.sum(dim=-1)])", "row_sum", "runtime_gate"),
    ("", "", "torch.from_numpy(x.numpy().sum(axis=-1))", "row_sum", "runtime_gate"),  # NumPy does the work
]


def test_pytorch_doing_the_work_beside_a_noop_kernel_scores_zero():
    reward = get_reward("triton_exec", trials=1)
    programs = [NOOP.format(imports=i, init=init or "pass", expr=e) for i, init, e, _, _ in HACKS]
    refs = [REFERENCES.get(r, r) for _, _, _, r, _ in HACKS]
    out = reward(prompts=["p"] * len(HACKS), completions=[block(p) for p in programs], reference=refs)
    assert [o for o, _ in reward.last_outcomes] == [want for *_, want in HACKS], reward.last_outcomes
    assert out.scores == [0.0] * len(HACKS)
    messages = [m for _, m in reward.last_outcomes]
    assert messages[4] == "trial 0: PyTorch did work outside Triton kernels: addmm x1"
    assert messages[5].startswith("trial 0: PyTorch did work outside Triton kernels: _softmax x1")
    assert "host:numpy" in messages[8]
    # a launch the text shows but the run never makes
    idle = NOOP.format(imports="", init="pass", expr="x").replace("        noop_kernel[(1,)]", "        0 and noop_kernel[(1,)]")
    assert reward.score(idle, REFERENCES["row_sum"]) == ("runtime_gate", "trial 0: no Triton kernel was launched")
