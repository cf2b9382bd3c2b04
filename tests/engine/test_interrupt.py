"""Interruptible generation (`InterruptibleEngine.interrupt`) in the torch engine, and the carry-over
that continues cut rows (`covey.engine.carry.continue_generation`). The vllm engine's are in
tests/engine/test_vllm_engine.py."""

import threading
import time

import pytest
import torch

import covey.engine.torch_engine as torch_engine
from covey.engine import InterruptibleEngine, Row, SamplingParams, TorchEngine
from covey.engine.base import missing_protocols
from covey.engine.carry import continue_generation, generation_rows, out_of_budget, row_from, row_state
from covey.engine.vllm_engine import VllmEngine
from covey.models import load


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-llama", initializer_range=0.2, seed=5)  # spread logits: no greedy ties


@pytest.fixture
def engine(tiny):
    model, tok = tiny
    return TorchEngine(model, dtype="fp32", tokenizer=tok)


PROMPTS = [[5, 9, 13], [7, 3], [21, 22, 23, 24]]


def _interrupt_at(monkeypatch, engine, step: int):
    """Make the engine's decode loop call `engine.interrupt()` inside its decode step number `step`
    (deterministic: that step's token is the last one sampled)."""
    calls = {"n": 0, "answer": []}
    real = torch_engine.decode_step

    def counting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == step:
            calls["answer"].append(engine.interrupt())
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_engine, "decode_step", counting)
    return calls


def test_engines_declare_the_protocol():
    assert missing_protocols(TorchEngine, (InterruptibleEngine,)) == {}
    assert missing_protocols(VllmEngine, (InterruptibleEngine,)) == {}


def test_interrupted_rows_are_the_prefix_of_the_uninterrupted_run(engine, monkeypatch):
    """Seeded: each (row, step) has its own uniform, so the cut rows are exactly the first k+1
    tokens (and log-probs) of the full run, version 0, finish reason "abort"."""
    sp = SamplingParams(max_new_tokens=12, ignore_eos=True, seed=3, return_entropies=True)
    full = engine.generate(PROMPTS, 2, sp)
    calls = _interrupt_at(monkeypatch, engine, 4)  # inside step 4: tokens 0..4 sampled
    cut = engine.generate(PROMPTS, 2, sp)
    assert calls["answer"] == [True]
    assert cut.finish_reason == ["abort"] * 6 and cut.lengths.tolist() == [5] * 6
    assert torch.equal(cut.completion_ids, full.completion_ids[:, :5])
    assert torch.equal(cut.logprobs, full.logprobs[:, :5]) and torch.equal(cut.entropies, full.entropies[:, :5])
    assert cut.policy_version.tolist() == [[0] * 5] * 6
    monkeypatch.undo()
    again = engine.generate(PROMPTS, 2, sp)  # the interrupt was consumed: the next call runs to the end
    assert torch.equal(again.completion_ids, full.completion_ids) and again.finish_reason == ["length"] * 6


def test_interrupt_keeps_rows_that_already_finished(engine, tiny, monkeypatch):
    """A row that hit its stop token before the interrupt keeps "stop"; the others are "abort"."""
    sp = SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True)
    base = engine.generate(PROMPTS[:2], 1, sp)
    stop = int(base.completion_ids[0, 1])  # row 0 stops at its 2nd token
    sp = SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True, stop_token_ids=(stop,))
    ref = engine.generate(PROMPTS[:2], 1, sp)
    _interrupt_at(monkeypatch, engine, 5)
    cut = engine.generate(PROMPTS[:2], 1, sp)
    assert cut.finish_reason[0] == "stop" and cut.lengths[0] == 2
    if ref.lengths[1] > 6:  # row 1 was still running at step 5
        assert cut.finish_reason[1] == "abort" and cut.lengths[1] == 6
    assert torch.equal(cut.completion_ids[:, :2], ref.completion_ids[:, :2])


def test_continuation_under_the_same_weights_equals_the_uninterrupted_run(engine, monkeypatch):
    """Greedy: prompt + partial + continuation = the uninterrupted completion, token for token, and
    the continuation's log-probs (recomputed by a prefill of prompt + partial) agree to fp32 rounding."""
    sp = SamplingParams(max_new_tokens=12, greedy=True, ignore_eos=True)
    full = engine.generate(PROMPTS, 1, sp)
    _interrupt_at(monkeypatch, engine, 3)
    cut = engine.generate(PROMPTS, 1, sp)
    monkeypatch.undo()
    assert cut.finish_reason == ["abort"] * 3 and cut.lengths.tolist() == [4] * 3
    done = continue_generation(engine, cut, sp)
    assert done.finish_reason == ["length"] * 3 and torch.equal(done.completion_ids, full.completion_ids)
    assert [p.tolist() for p in done.prompt_ids] == PROMPTS  # the original prompts, not prompt + partial
    assert (done.logprobs - full.logprobs).abs().max() < 1e-4
    assert torch.equal(done.logprobs[:, :4], cut.logprobs)  # the partial tokens keep their own log-probs


def test_continuation_after_a_weight_update_carries_both_versions(engine, tiny, monkeypatch):
    """New weights between the cut and the continuation: partial tokens keep version 0 and their
    log-probs, the continuation is version 7 and equals a direct generate on prompt + partial with
    the new weights (same seed); the per-row budget is max_new_tokens minus the partial."""
    sp = SamplingParams(max_new_tokens=9, ignore_eos=True, seed=11)
    _interrupt_at(monkeypatch, engine, 2)
    cut = engine.generate(PROMPTS, 2, sp)
    monkeypatch.undo()
    other, _ = load("tiny-llama", initializer_range=0.2, seed=6)
    engine.load_weights(other.float(), version=7)
    more = SamplingParams(max_new_tokens=9, ignore_eos=True, seed=12)
    done = continue_generation(engine, cut, more)
    assert done.lengths.tolist() == [9] * 6 and done.finish_reason == ["length"] * 6
    assert done.policy_version.tolist() == [[0] * 3 + [7] * 6] * 6
    assert torch.equal(done.completion_ids[:, :3], cut.completion_ids) and torch.equal(done.logprobs[:, :3], cut.logprobs)
    direct = engine.generate([p.tolist() + c.tolist() for p, c in zip(cut.prompt_ids, cut.completion_ids)], 1,
                             SamplingParams(max_new_tokens=6, ignore_eos=True, seed=12))  # fmt: skip
    assert torch.equal(done.completion_ids[:, 3:], direct.completion_ids) and torch.equal(done.logprobs[:, 3:], direct.logprobs)
    engine.load_weights(tiny[0], version=0)


def test_interrupt_skips_waves_not_started_and_continuation_fills_them(tiny, monkeypatch):
    """With waves (max_rows=2: one prompt x 2 per wave) an interrupt in wave 1 returns the later
    waves' rows empty, "abort"; continuing gives every row its full budget with per-prompt limits."""
    model, tok = tiny
    engine = TorchEngine(model, dtype="fp32", tokenizer=tok, max_rows=2)
    sp = SamplingParams(max_new_tokens=6, ignore_eos=True, seed=1, prompt_max_new_tokens=(6, 4, 5))
    _interrupt_at(monkeypatch, engine, 1)
    cut = engine.generate(PROMPTS, 2, sp)
    monkeypatch.undo()
    assert cut.lengths.tolist() == [2, 2, 0, 0, 0, 0] and cut.finish_reason == ["abort"] * 6
    done = continue_generation(engine, cut, SamplingParams(max_new_tokens=6, ignore_eos=True, seed=2, prompt_max_new_tokens=(6, 4, 5)))
    assert done.lengths.tolist() == [6, 6, 4, 4, 5, 5] and done.finish_reason == ["length"] * 6
    assert torch.equal(done.completion_ids[:2, :2], cut.completion_ids[:2, :2])


def test_interrupt_from_another_thread_returns_promptly(engine):
    """The async use: generate runs in a thread, another thread interrupts it; the call returns
    (no hang) with the rows cut short; with nothing in flight interrupt() is a no-op."""
    assert engine.interrupt() is False
    sp = SamplingParams(max_new_tokens=1000, ignore_eos=True, seed=0)
    result, answer = {}, []
    worker = threading.Thread(target=lambda: result.setdefault("gen", engine.generate([[5, 9, 13]], 4, sp)))
    worker.start()
    deadline = time.monotonic() + 60
    while not engine._running and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)
    answer.append(engine.interrupt())
    worker.join(timeout=60)
    assert not worker.is_alive(), "generate did not return after interrupt()"
    gen = result["gen"]
    assert answer == [True] and gen.finish_reason == ["abort"] * 4 and int(gen.lengths.max()) < 1000
    assert engine.interrupt() is False
    short = engine.generate([[5, 9, 13]], 1, SamplingParams(max_new_tokens=5, ignore_eos=True, seed=0))
    assert short.finish_reason == ["length"]


def test_carry_helpers():
    """out_of_budget finishes a carried row with no budget left; row_state/row_from round-trip;
    generation_rows reads a Generation back as rows."""
    r = Row([1, 2], tokens=[3, 4], logprobs=[-0.5, -0.25], versions=[0, 1], finish_reason="abort")
    assert not out_of_budget(r, 3) and r.finish_reason == "abort"
    assert out_of_budget(r, 2) and r.finish_reason == "length"
    done = Row([1], tokens=[3, 4], finish_reason="stop")
    assert not out_of_budget(done, 1) and done.finish_reason == "stop"
    back = row_from(row_state(r))
    assert (back.prompt, back.tokens, back.logprobs, back.versions, back.finish_reason) == ([1, 2], [3, 4], [-0.5, -0.25], [0, 1], "length")
    from covey.engine.carry import rows_generation

    gen = rows_generation([r, Row([7], finish_reason="abort")], torch.tensor([0, 1]), pad_id=0)
    assert gen.lengths.tolist() == [2, 0] and gen.finish_reason == ["length", "abort"]
    rows = generation_rows(gen)
    assert rows[0].tokens == [3, 4] and rows[0].versions == [0, 1] and rows[1].tokens == [] and rows[1].prompt == [7]
