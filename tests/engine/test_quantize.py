"""Low-precision rollouts (Sol-RL style): `TorchEngine(quantize="int8")` generates with int8 decoder
linears on the CPU while the learner stays in full precision; the mismatch is measured per step
(`rollout/logprob_gap_*`) and the weights are re-quantized at every sync."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.engine.forward import _int8
from covey.learner.policy_loss import logprob_gap
from covey.learner.logprobs import completion_logprobs
from covey.models import load
from covey.rollouts import Rollouts

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [[1, 40, 41, 42], [1, 50, 51], [1, 60, 61, 62, 63, 64]]


@pytest.fixture(scope="module")
def tiny():
    model, tok = load("tiny-llama", seed=3)
    return model.float().eval(), tok


def _gap(engine_gen, model):
    with torch.no_grad():
        ref, _ = completion_logprobs(model, engine_gen.prompt_ids, engine_gen.completion_ids, engine_gen.completion_mask)
    return (engine_gen.logprobs - ref).abs()[engine_gen.completion_mask == 1]


def test_int8_weights_are_symmetric_per_channel():
    """scale = max|w| / 127 per output row, zero point 0, round half to even."""
    w = torch.tensor([[1.0, -0.5, 0.25], [0.0, 0.02, -0.01]])
    q, bias = torch.ops.quantized.linear_unpack(_int8(w, torch.tensor([0.5, -1.0])))
    assert q.int_repr().tolist() == [[127, -64, 32], [0, 127, -64]]  # -63.5 -> -64, 31.75 -> 32, -63.5 -> -64
    assert torch.allclose(q.q_per_channel_scales().float(), torch.tensor([1 / 127, 0.02 / 127]))
    assert q.q_per_channel_zero_points().tolist() == [0, 0] and bias.tolist() == [0.5, -1.0]
    x = torch.tensor([[1.0, 2.0, 3.0]])
    y = torch.ops.quantized.linear_dynamic(x, _int8(w, torch.tensor([0.5, -1.0])))
    assert torch.allclose(y, x @ w.T + torch.tensor([0.5, -1.0]), atol=0.03)  # int8 activations and weights


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_int8_engine_generates_with_a_small_measured_mismatch(tiny, dtype):
    """Same seeded call: the int8 engine's log-probs differ from the fp32 learner's by a small,
    nonzero amount (fp32 engine: ~1e-7); the tokens are a real sample (most equal the fp32 engine's)."""
    model, tok = tiny
    sp = SamplingParams(max_new_tokens=12, ignore_eos=True, seed=0)
    full = TorchEngine(model, dtype="fp32", tokenizer=tok).generate(PROMPTS, 2, sp)
    q = TorchEngine(model, dtype=dtype, tokenizer=tok, quantize="int8")
    assert q.weights.quantize == "int8" and not q.shares_weights
    g = q.generate(PROMPTS, 2, sp)
    assert g.completion_ids.shape == (6, 12) and g.finish_reason == ["length"] * 6
    d, d_full = _gap(g, model), _gap(full, model)
    assert d_full.max() < 1e-5 and 1e-4 < float(d.mean()) < 0.05 and float(d.max()) < 0.5
    assert (g.completion_ids == full.completion_ids).float().mean() > 0.5


def test_weights_are_requantized_at_every_sync(tiny):
    """After load_weights(other) the int8 engine follows the new weights (its log-probs are close to
    the other model's, far from the first); loading the first weights back gives the first
    outputs bit for bit (quantization is deterministic)."""
    model, tok = tiny
    other, _ = load("tiny-llama", seed=4)
    other = other.float().eval()
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok, quantize="int8")
    sp = SamplingParams(max_new_tokens=10, ignore_eos=True, seed=5)
    before = engine.generate(PROMPTS, 2, sp)
    packed = engine.weights.layers[0].packed["qkv"]
    engine.load_weights(other)
    assert engine.weights.layers[0].packed["qkv"] is not packed and engine.version == 1
    after = engine.generate(PROMPTS, 2, sp)
    assert float(_gap(after, other).mean()) < 0.05 and float(_gap(after, model).mean()) > 0.2
    engine.load_weights(model)
    again = engine.generate(PROMPTS, 2, sp)
    assert torch.equal(again.completion_ids, before.completion_ids) and torch.equal(again.logprobs, before.logprobs)


def test_logprob_gap_metric():
    """Mean / max of |old - behaviour| over generated tokens only (hand-computed)."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    b = Rollouts(prompt_ids=[torch.tensor([1]), torch.tensor([2])], completion_ids=torch.zeros(2, 3, dtype=torch.long),
                 completion_mask=mask, behaviour_logprobs=torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]]),
                 group=torch.tensor([0, 0]), prompt_id=torch.tensor([0, 0]))  # fmt: skip
    b.old_logprobs = torch.tensor([[-1.1, -1.7, -9.0], [-0.5, -9.0, -9.0]])
    got = logprob_gap(b)
    assert got["rollout/logprob_gap_mean"] == pytest.approx((0.1 + 0.3 + 0.0) / 3, abs=1e-6)
    assert got["rollout/logprob_gap_max"] == pytest.approx(0.3, abs=1e-6)


def test_config_refuses_int8_on_cuda_and_unknown_formats():
    with pytest.raises(ValueError, match="runs on the CPU only"):
        TorchEngine.check_config({"quantize": "int8"}, None, set(), "cuda:0")
    TorchEngine.check_config({"quantize": "int8"}, None, set(), "cpu")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "covey.cli", "config", "show", "examples/quickstart.yaml", "engine.quantize=int4"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 2 and out.stderr.startswith("error:") and "quantize" in out.stderr, out.stderr


def test_sol_rl_example_trains_two_steps(tmp_path):
    """examples/sol_rl/int8_rollouts.yaml (int8 engine + TIS) cut to tiny sizes: trains and logs the gap."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", "examples/sol_rl/int8_rollouts.yaml", "model.name=tiny-llama", "steps=2",
                          "eval.size=0", "rollout.prompts_per_step=2", "rollout.group_size=2", "sampling.max_new_tokens=8",
                          "optim.micro_batch_size=2", "optim.skip_zero_advantage=false",  # the correction runs on every row
                          f"log.dir={tmp_path}", "log.progress=false"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    run = next(p for p in tmp_path.iterdir() if (p / "metrics.jsonl").is_file())
    text = (run / "metrics.jsonl").read_text()
    assert text.count("rollout/logprob_gap_mean") >= 2 and "correction/weight" in text
