"""CUDA: the engine, the learner and a training run on one GPU (skipped without CUDA).

Written without a GPU at hand (the CPU tests in tests/engine/test_devices.py and
tests/learner/test_learner_shared.py check the device handling); run with
`pytest tests/gpu -q` on a machine with CUDA.
"""

import copy

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.learner.logprobs import completion_logprobs
from covey.models import load

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

INIT = 0.2  # spread logits: no greedy argmax ties that rounding could break either way


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2"])
def tiny(request):
    model, tok = load(request.param, initializer_range=INIT, seed=5)
    return model.float().cuda().eval(), tok


def _prompts(tok):
    return [tok.encode("What is 12+7?"), tok.encode("1"), tok.encode("hello, world: abc")]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_engine_runs_on_cuda_and_returns_cpu_tensors(tiny, dtype):
    model, tok = tiny
    engine = TorchEngine(model, dtype=dtype, tokenizer=tok)
    assert engine.device.type == "cuda" and engine.weights.embed.device.type == "cuda"
    assert not engine.weights.layers[0].packed  # no oneDNN packing on CUDA
    sp = SamplingParams(max_new_tokens=16, seed=0, top_p=0.9, return_entropies=True, stop_strings=("a",))
    out = engine.generate(_prompts(tok), 4, sp)
    assert out.completion_ids.device.type == "cpu" and out.completion_ids.shape[0] == 12
    assert torch.isfinite(out.logprobs).all() and (out.logprobs <= 0).all()


def test_decode_loop_does_not_synchronise_every_token(tiny):
    import warnings

    model, tok = tiny
    engine = TorchEngine(model, dtype="bf16", tokenizer=tok)
    sp = SamplingParams(max_new_tokens=64, seed=0, ignore_eos=True)
    engine.generate(_prompts(tok), 4, sp)  # warm-up
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.generate(_prompts(tok), 4, sp)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    # ignore_eos: no row can stop early, so the loop never counts finished rows; what remains is the
    # one wait for the results (tests/engine/test_host_syncs.py counts the same path on the CPU).
    assert len(syncs) <= 64 // 8, f"{len(syncs)} host synchronisations for 64 tokens"


def test_greedy_equals_hf_generate_on_cuda(tiny):
    model, tok = tiny
    out = TorchEngine(model, dtype="fp32", tokenizer=tok).generate(
        _prompts(tok), 1, SamplingParams(greedy=True, max_new_tokens=24, ignore_eos=True)
    )
    for i, p in enumerate(_prompts(tok)):
        ref = model.generate(torch.tensor([p], device="cuda"), max_new_tokens=24, min_new_tokens=24, do_sample=False,
                             pad_token_id=tok.pad_token_id)[0, len(p):]  # fmt: skip
        assert out.completion_ids[i].tolist() == ref.cpu().tolist()


def test_seeded_sampling_matches_cpu(tiny):
    """Uniforms are drawn on the CPU: the same seed gives the same tokens on both devices (fp32)."""
    model, tok = tiny
    sp = SamplingParams(max_new_tokens=16, seed=11, temperature=0.8, ignore_eos=True)
    gpu = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 3, sp)
    cpu = TorchEngine(copy.deepcopy(model).cpu(), dtype="fp32").generate(_prompts(tok), 3, sp)
    same = (gpu.completion_ids == cpu.completion_ids).float().mean()
    assert same > 0.95  # a near-tie can flip a token, after which a row diverges
    assert (gpu.logprobs[:, 0] - cpu.logprobs[:, 0]).abs().max() < 1e-3


@pytest.mark.parametrize("share", [False, True])
def test_engine_logprobs_match_learner_logprobs_on_cuda(tiny, share):
    model, tok = tiny
    gen = TorchEngine(model, dtype="fp32").generate(_prompts(tok), 2, SamplingParams(max_new_tokens=12, seed=3, temperature=0.7))
    with torch.no_grad():
        lp, _ = completion_logprobs(model, gen.prompt_ids, gen.completion_ids, gen.completion_mask, temperature=0.7,
                                    share_prompts=share)  # fmt: skip
    assert lp.device.type == "cuda"
    assert (lp.cpu() - gen.logprobs).abs().max() < 1e-3


def test_shared_prompt_gradients_equal_unshared_on_cuda(tiny):
    model, _ = tiny
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 100, (n,), generator=g) for n in (5, 9)]
    rows = [prompts[i] for i in (0, 0, 1, 1, 0)]
    ids, mask = torch.randint(5, 100, (5, 6), generator=g), torch.ones(5, 6)
    grads = []
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp, _ = completion_logprobs(model, rows, ids, mask, share_prompts=share)
        lp.sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)
    for k in grads[0]:
        assert (grads[0][k] - grads[1][k]).abs().max() <= 1e-4 * max(float(grads[0][k].abs().max()), 1e-6), k


def _cfg(tmp_path, **extra):
    from covey.train.config import validate_config

    return validate_config({
        "model": {"name": "tiny-llama", "dtype": "auto"},
        "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 64, "n_test": 16}},
        "rollout": {"prompts_per_step": 4, "group_size": 4},
        "sampling": {"max_new_tokens": 8},
        "engine": {"name": "torch", "dtype": "auto"},
        "optim": {"lr": 3e-3, "micro_batch_size": 8},
        "reward_workers": 0, "device": "cuda",
        "log": {"progress": False, "report_to": ["jsonl"]},
        **extra,
    })  # fmt: skip


def test_grpo_step_on_cuda(tmp_path):
    from covey.train.trainer import Trainer

    trainer = Trainer(_cfg(tmp_path, steps=2), tmp_path / "run")
    try:
        assert next(trainer.model.parameters()).device.type == "cuda" and trainer.learner.dtype == "bf16"
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        m = trainer.step()
        assert 0 < m["memory/peak_gb"] < 10 and m["learn/grad_norm"] == m["learn/grad_norm"]
        moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
        assert moved or m.get("adv/zero_signal_groups", 0) == 1.0
        assert all(s.device.type == "cuda" for st in trainer.optimizer.state.values() for s in st.values() if s.dim())
    finally:
        trainer.close()


def test_resume_on_cuda_continues_the_run(tmp_path):
    from covey.train.metrics import read_metrics
    from covey.train.trainer import Trainer

    cfg = _cfg(tmp_path, steps=4, checkpoint={"every": 2})
    straight = Trainer(cfg, tmp_path / "a")
    try:
        for _ in range(4):
            straight.step()
    finally:
        straight.close()
    first = Trainer(cfg, tmp_path / "b")
    try:
        first.step(), first.step()
    finally:
        first.close()
    resumed = Trainer(cfg, tmp_path / "b", resume=True)
    try:
        assert resumed.step_num == 2 and next(resumed.model.parameters()).device.type == "cuda"
        resumed.step(), resumed.step()
    finally:
        resumed.close()
    a, b = read_metrics(tmp_path / "a" / "metrics.jsonl"), read_metrics(tmp_path / "b" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    # GPU kernels are not bit-reproducible (atomics in backward): the same run within tolerance.
    for ra, rb in zip(a, b):
        assert ra["reward/mean"] == pytest.approx(rb["reward/mean"], abs=0.3)
        assert ra["length/mean"] == pytest.approx(rb["length/mean"], rel=0.5)
