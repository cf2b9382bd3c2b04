"""triton_exec without triton: the torch sandbox profile, the tensor harness and the host-side verdict.

`language: torch` runs plain-PyTorch ``ModelNew`` programs through the same path that Triton kernels take
(tests/rewards/test_triton_exec_kernels.py, skipped where triton is not installed). Every sandbox run here
imports torch (about 1.5 s on an idle core), so the end-to-end cases share a few reward calls.
"""

import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from _non_root import run_as_non_root
from covey.cli import app
from covey.rewards import get_reward
from covey.rewards.sandbox.profile import STDLIB, Profile
from covey.rewards.sandbox.tensors import compare, decode, run_module
from covey.rewards.sandbox.torch_profile import torch_profile, triton_available
from covey.rewards.triton_gate import runtime_gate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rewards" / "triton_kernels.yaml"

REF = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x + y) * self.scale

def get_inputs():
    return [torch.randn(4, 6), torch.randn(4, 6)]

def get_init_inputs():
    return [2.0]
'''

NEW = '''
import torch

class ModelNew(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return (x + y).clamp(min=0) * self.scale
'''


def block(code):
    return f"Here it is:\n```python\n{code}\n```"


def enc(a):
    import base64
    a = np.ascontiguousarray(a)
    return {"t": a.dtype.str, "d": "torch.float32", "s": list(a.shape), "b": base64.b64encode(a.tobytes()).decode()}


# --- the verdict (host side, no sandbox) ---

def test_compare_is_torch_allclose_with_shape_first():
    ref = np.array([1.0, -2.0, 100.0])
    assert compare(ref + np.array([0.0199, -0.0299, 1.0099]), ref, 1e-2, 1e-2) is None  # bound 0.01 + 0.01 * |ref|: 0.02, 0.03, 1.01
    assert compare(ref + np.array([0.0, 0.0, 1.02]), ref, 1e-2, 1e-2) == "output: values differ (max abs diff 1.02 at index 2)"
    assert compare(ref + np.array([0.0, 0.031, 0.0]), ref, 1e-2, 1e-2).endswith("at index 1)")
    assert compare(ref.reshape(3, 1), ref, 1e-2, 1e-2) == "output: shape [3, 1] != expected [3]"
    nan = np.array([1.0, np.nan, 100.0])
    assert compare(nan, ref, 1e-2, 1e-2) == "output: values differ (max abs diff nan at index 1)"
    assert compare(nan, nan, 1e-2, 1e-2) is not None  # NaN never passes, even against NaN (torch.allclose's default)
    assert compare([ref, 3], [ref, 3], 0, 0) is None
    assert compare([ref, 3], [ref, 4], 0, 0) == "output[1]: 3 != 4"
    assert compare([ref], [ref, ref], 0, 0) == "output: expected a sequence of 2, got list of 1"
    assert compare(3.0, ref, 0, 0) == "output: expected a tensor, got float"
    assert compare(np.zeros(0), np.zeros(0), 0, 0) is None


@pytest.mark.parametrize("bad", [
    {"t": "|O", "d": "torch.float32", "s": [1], "b": "AAAAAAAAAAA="},  # object arrays never come back
    {"t": "<U1", "d": "torch.float32", "s": [1], "b": "AAAAAA=="},
    {"t": "<f4", "d": "torch.float32", "s": [3], "b": "AACAPwAAAEA="},  # 8 bytes for 3 floats
    {"t": "<f4", "d": "torch.float32", "s": [-1], "b": ""},
    {"t": "<f4", "d": "torch.float32", "s": [1], "b": "not base64!"},
    {"t": "<f4", "s": [1], "b": "AACAPw=="},
    {"v": {"a": 1}},
    {"l": [{"l": [{"l": [{"l": [{"l": [{"l": [{"l": [{"l": [{"l": [{"l": []}]}]}]}]}]}]}]}]}]},  # deeper than 8
    [1, 2],
])
def test_decode_refuses_what_the_harness_cannot_have_written(bad):
    with pytest.raises(ValueError):
        decode(bad)


def test_profiles():
    assert STDLIB.python_args() == ["-I", "-B", "-S"]
    prof = torch_profile()
    assert prof.python_args()[:4] == ["-I", "-B", "-S", "-c"] and ("TRITON_INTERPRET", "1") in prof.env
    assert all(os.path.isdir(p) for p in prof.ro_paths) and prof.sys_path == prof.ro_paths
    with pytest.raises(ValueError, match="under no ro_paths"):
        Profile("x", ro_paths=("/opt/a",), sys_path=("/opt/b",))
    with pytest.raises(ValueError, match="absolute"):
        Profile("x", ro_paths=("opt/a",))


# --- end to end in the sandbox (language: torch) ---

@pytest.mark.slow  # 7 sandbox runs, each importing torch
def test_harness_outcomes_pass_shape_exception_nan_nondeterminism():
    reward = get_reward("triton_exec", language="torch", trials=2)
    cands = [
        NEW,
        NEW.replace("return (x + y).clamp(min=0) * self.scale", "return ((x + y).clamp(min=0) * self.scale).flatten()"),
        NEW.replace("return (x + y)", "raise RuntimeError('boom')\n        return (x + y)"),  # an exception
        NEW.replace("* self.scale", "* self.scale * float('nan')"),  # NaN everywhere
        NEW.replace("* self.scale", "* self.scale + 0.1 * torch.rand_like(x)"),  # depends on the RNG: not the reference
        NEW.replace("ModelNew", "ModelOld"),  # no ModelNew
        "print('no code block')",
    ]
    completions = [block(c) for c in cands[:-1]] + [cands[-1]]
    out = reward(prompts=["p"] * 7, completions=completions, reference=[REF] * 7)
    assert out.scores == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert out.metrics["pass"] == [1.0, 0, 0, 0, 0, 0, 0]
    assert out.metrics["mismatch"] == [0, 1.0, 0, 1.0, 1.0, 0, 0]
    assert out.metrics["error"] == [0, 0, 1.0, 0, 0, 1.0, 0]
    assert out.metrics["no_code"] == [0, 0, 0, 0, 0, 0, 1.0] and out.metrics["reference_error"] == [0.0] * 7
    assert len(reward._references) == 1  # the reference ran once for the batch
    messages = [m for _, m in reward.last_outcomes]
    assert messages[:3] == ["", "trial 0: output: shape [24] != expected [4, 6]", "forward: RuntimeError: boom (program.py:10)"]
    assert messages[3] == "trial 0: output: values differ (max abs diff nan at index 0, 0)"
    assert messages[4].startswith("trial 0: output: values differ")
    assert messages[5:] == ["init: NameError: the program defines no ModelNew", "no ```python block"]


def test_reference_failure_scores_none_and_items_without_reference_none():
    reward = get_reward("triton_exec", language="torch", trials=1)
    broken = REF.replace("return [torch.randn(4, 6), torch.randn(4, 6)]", "raise ValueError('bad data')")
    out = reward(prompts=["p"] * 2, completions=[block(NEW)] * 2, reference=[broken, None])
    assert out.scores == [None, None] and out.metrics["reference_error"] == [1.0]
    assert reward.last_outcomes == [("reference", "get_inputs: ValueError: bad data (program.py:13)"), None]


def test_timeout_is_a_zero():
    slow = get_reward("triton_exec", language="torch", trials=1, timeout_s=3)
    ok = get_reward("triton_exec", language="torch", trials=1)
    assert ok.reference(REF)[2][0].shape == (4, 6)
    slow._references = ok._references  # the reference ran under the longer limit
    spin = NEW.replace("return (x + y)", "while True:\n            pass\n        return (x + y)")
    outcome, message = slow.score(spin, REF)
    assert outcome == "timeout" and message.startswith("timed out after")


def test_the_program_is_contained_and_sees_inputs_not_reference_outputs():
    probe = '''
import os, socket, sys, torch

def denied(f):
    try:
        f()
        return 0.0
    except OSError:
        return 1.0

class ModelNew(torch.nn.Module):
    def forward(self, x):
        site = sys.path[0]
        return torch.tensor([
            denied(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2)),
            denied(lambda: open(os.path.join(site, "covey_probe"), "w")),
            denied(lambda: open("/etc/passwd")),
            float(os.environ.get("TRITON_INTERPRET") == "1"),
            float(torch.get_num_threads() == 1),
            float(x.sum().item()),
        ])
'''
    run = run_module(probe, "candidate", [0], init={"l": []}, inputs=[{"l": [enc(np.array([1.5, 2.0], np.float32))]}])
    assert run.error is None, (run.error, run.run.stderr[-2000:])
    assert decode(run.records[0]["out"]).tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 3.5]


def test_non_root_host_runs_the_torch_profile():
    import numpy
    site = os.path.dirname(os.path.dirname(numpy.__file__))
    script = (
        f"import sys; sys.path.append({site!r})\n"
        "import importlib.util\n"
        "if importlib.util.find_spec('torch') is None:\n"
        "    print('unreadable'); raise SystemExit\n"
        "from sbx.tensors import run_module, decode\n"
        "prog = 'import os, torch\\nclass ModelNew(torch.nn.Module):\\n    def forward(self, x):\\n"
        "        return x * 2 + os.getuid()'\n"
        "try:\n"
        "    run = run_module(prog, 'candidate', [0], init={'l': []}, inputs=[{'l': [{'v': 1.5}]}])\n"
        "except sbx.SandboxUnavailable as e:\n"
        "    print('refused', e); raise SystemExit\n"
        "import os\n"
        "print(run.error, decode(run.records[0]['out']) == 3.0 + os.getuid())\n"
    )
    out, why = run_as_non_root(script, timeout=120)
    if out is None:
        pytest.skip(why)
    if out.stdout.startswith("unreadable"):  # e.g. a checkout inside a 0700 `mktemp -d` folder
        pytest.skip(f"the non-root user cannot read {site}")
    if out.stdout.startswith("refused"):
        pytest.skip(f"bubblewrap cannot run for a non-root user here: {out.stdout.strip()}")
    assert out.stdout.strip() == "None True", (out.stdout, out.stderr[-2000:])


@pytest.mark.skipif(triton_available(), reason="triton is installed: the missing-triton error cannot happen")
def test_without_triton_configuring_the_reward_is_one_error_line_exit_2():
    res = CliRunner().invoke(app, ["config", "show", str(EXAMPLE), "reward_workers=0"])
    assert res.exit_code == 2, res.output
    assert "error: " in res.output and "the triton package is not installed" in res.output
    assert "Traceback" not in res.output


def test_bad_params_are_config_errors():
    with pytest.raises(ValueError, match="language must be"):
        get_reward("triton_exec", language="cuda")
    with pytest.raises(ValueError, match="trials must be"):
        get_reward("triton_exec", language="torch", trials=0)


def test_docstring_examples_pass():
    import doctest

    from covey.rewards.sandbox import profile, tensors

    for mod in (profile, tensors):
        result = doctest.testmod(mod)
        assert result.attempted > 0 and result.failed == 0, mod.__name__


def test_a_failed_reference_is_cached_but_a_timed_out_one_is_retried(monkeypatch):
    from covey.rewards import triton_exec
    from covey.rewards.sandbox import RunResult
    from covey.rewards.sandbox.tensors import ModuleRun

    calls = []

    def fake(source, mode, seeds, **_):
        calls.append(source)
        timed_out = source == "slow"
        return ModuleRun(error="timed out" if timed_out else "get_inputs: ValueError: x",
                         run=RunResult(exit_code=-9 if timed_out else 0, stdout="", stderr="", timed_out=timed_out))

    monkeypatch.setattr(triton_exec, "run_module", fake)
    reward = get_reward("triton_exec", language="torch")
    assert [reward.reference(s) for s in ("slow", "slow", "bad", "bad")] == ["timed out"] * 2 + ["get_inputs: ValueError: x"] * 2
    assert calls == ["slow", "slow", "bad"]


# --- what the program writes is data: the dtype rule, and channel lines that used to raise ---

def _tensor(a, torch_dtype):
    return decode(enc(a) | {"d": torch_dtype})


def test_a_different_dtype_is_a_mismatch_as_in_torch_allclose():
    ref = _tensor(np.array([1.0, 2.0], np.float32), "torch.float32")
    assert compare(_tensor(np.array([1.0, 2.0], np.float32), "torch.float32"), ref, 1e-2, 1e-2) is None
    half = _tensor(np.array([1.0, 2.0], np.float16), "torch.float16")
    assert compare(half, ref, 1e-2, 1e-2) == "output: dtype torch.float16 != expected torch.float32"
    # bfloat16 travels as float32: the torch dtype still tells them apart
    bf16 = _tensor(np.array([1.0, 2.0], np.float32), "torch.bfloat16")
    assert compare(bf16, ref, 1e-2, 1e-2) == "output: dtype torch.bfloat16 != expected torch.float32"
    assert compare([ref.reshape(1, 2)], [ref], 0, 0) == "output[0]: shape [1, 2] != expected [2]"
    with pytest.raises(ValueError, match="torch dtype"):
        decode(enc(np.zeros(1, np.float32)) | {"d": 5})


def test_a_huge_integer_against_a_float_is_a_mismatch_not_an_exception():
    assert compare(10**1000, 1.0, 1e-2, 1e-2) == "output: " + "1" + "0" * 39 + " is out of range"
    assert compare(10**1000, 10**1000 + 1, 0, 0).startswith("output: 1000")


def _fake_channel(monkeypatch, channel: bytes):
    from covey.rewards.sandbox import RunResult, tensors

    monkeypatch.setattr(tensors, "execute", lambda *a, **k: RunResult(exit_code=0, stdout="", stderr="", channel=channel))


@pytest.mark.parametrize("line", [
    b"[" * 100_000 + b"]" * 100_000,  # nesting past the recursion limit: RecursionError in json
    b'{"i": 0, "out": {"v": 1' + b"0" * 5000 + b"}}",  # a 5,001-digit integer: ValueError in int()
])
def test_channel_lines_that_do_not_parse_are_the_runs_error(monkeypatch, line):
    _fake_channel(monkeypatch, line + b"\n")
    run = run_module("x", "candidate", [0], init={"l": []}, inputs=[{"l": []}])
    assert run.error.startswith("the result channel carried a line that is not JSON")


def test_bad_result_data_scores_zero_and_is_counted(monkeypatch):
    """The program answers every trial itself (it can write to the channel): a 1,000-digit integer where the
    reference returned a float, then a value that is not an encoding. Neither raises out of the reward."""
    from covey.rewards import triton_exec
    from covey.rewards.sandbox.tensors import ModuleRun

    reward = get_reward("triton_exec", language="torch", trials=1)
    reward._references["ref"] = ({"l": []}, [{"l": []}], [1.5])
    outs = iter([{"v": 10**1000}, {"t": "<f4", "d": "torch.float32", "s": [10**30], "b": ""}])
    monkeypatch.setattr(triton_exec, "run_module", lambda *a, **k: ModuleRun(records=[{"i": 0, "out": next(outs)}]))
    out = reward(prompts=["p"] * 2, completions=[block(NEW)] * 2, reference=["ref"] * 2)
    assert out.scores == [0.0, 0.0]
    assert [o for o, _ in reward.last_outcomes] == ["mismatch", "error"]
    assert out.metrics["mismatch"] == [1.0, 0.0] and out.metrics["error"] == [0.0, 1.0]


@pytest.mark.slow  # one sandbox run importing torch
def test_a_float16_output_fails_a_float32_reference_end_to_end():
    reward = get_reward("triton_exec", language="torch", trials=1)
    half = NEW.replace("return (x + y).clamp(min=0) * self.scale", "return ((x + y).clamp(min=0) * self.scale).half()")
    out = reward(prompts=["p"], completions=[block(half)], reference=[REF])
    assert out.scores == [0.0]
    assert reward.last_outcomes == [("mismatch", "trial 0: output: dtype torch.float16 != expected torch.float32")]


def test_the_recorder_sees_a_forward_and_notices_when_it_is_removed():
    """run_module's trace (what triton_exec's run-time gate reads), without the static filter in front."""
    prog = '''
import threading, torch
from torch.utils import _python_dispatch as pd

class ModelNew(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            return (x * 2).sum()
        self.off = pd._disable_current_modes()  # the recorder off for the rest of the forward: nothing below is seen
        self.off.__enter__()
        torch.Tensor.numpy = torch._C.TensorBase.numpy
        return (x * 2).numpy().sum().item()
'''
    inputs = [{"l": [enc(np.ones((1, 2), np.float32))]}, {"l": [enc(np.ones((2, 2), np.float32))]}]
    run = run_module(prog, "candidate", [0, 1], init={"l": []}, inputs=inputs, trace=True)
    assert run.error is None, run.error
    first, second = (r["trace"] for r in run.records)
    assert first == {"ops": {"mul": 1, "sum": 1}, "launches": 0}
    assert set(second["ops"]) == {"tamper:dispatch_mode", "tamper:dispatch_stack", "tamper:Tensor.numpy"}
    assert runtime_gate(second).startswith("PyTorch did work outside Triton kernels:")
