"""`TorchEngine.hidden_states` (`HiddenStatesEngine`): HF's `last_hidden_state` per sequence, from the
weights the engine holds (ragged sequences, row chunks, a bf16 copy refreshed by `load_weights`)."""

import pytest
import torch

from covey.engine import ForkingEngine, HiddenStatesEngine, TorchEngine
from covey.models import load

SEQS = [[5, 9, 11, 3, 7, 2], [4], [8, 8, 1]]  # ragged: left padding must not leak


def _hf(model, seq):
    with torch.no_grad():
        return model.get_decoder()(input_ids=torch.tensor([seq])).last_hidden_state[0].float()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_fp32_hidden_states_equal_hf_last_hidden_state(name):
    model, _ = load(name, initializer_range=0.2, seed=3)
    engine = TorchEngine(model, dtype="fp32", prefill_rows=2)  # two chunks: rows 0-1, then row 2
    assert isinstance(engine, HiddenStatesEngine) and isinstance(engine, ForkingEngine)
    out = engine.hidden_states(SEQS)
    assert [tuple(h.shape) for h in out] == [(len(s), model.config.hidden_size) for s in SEQS]
    for h, s in zip(out, SEQS):
        assert h.dtype == torch.float32 and h.device.type == "cpu"
        assert torch.allclose(h, _hf(model, s), atol=1e-5, rtol=1e-4)
    alone = TorchEngine(model, dtype="fp32", prefill_rows=16).hidden_states([SEQS[1]])[0]
    assert torch.allclose(alone, out[1], atol=1e-5)  # a row's states do not depend on its batch


def test_bf16_hidden_states_follow_load_weights():
    learner, _ = load("tiny-qwen2", initializer_range=0.2, seed=1)
    other, _ = load("tiny-qwen2", initializer_range=0.2, seed=2)
    engine = TorchEngine(learner, dtype="bf16")  # a bf16 copy: the learner's model is not what it runs
    before = engine.hidden_states(SEQS[:1])[0]
    engine.load_weights(other.state_dict())
    after = engine.hidden_states(SEQS[:1])[0]
    ref = TorchEngine(other, dtype="bf16").hidden_states(SEQS[:1])[0]
    assert torch.equal(after, ref)
    scale = _hf(other, SEQS[0]).abs().max()
    assert (after - _hf(other, SEQS[0])).abs().max() < 0.05 * scale  # bf16 rounding of the same states
    assert (before - _hf(other, SEQS[0])).abs().max() > 0.2 * scale  # the old weights' states differ


def test_hidden_states_reject_bad_sequences():
    model, _ = load("tiny-llama")
    engine = TorchEngine(model, dtype="fp32", max_positions=8)
    with pytest.raises(ValueError, match="sequences\\[1\\] is empty"):
        engine.hidden_states([[1, 2], []])
    with pytest.raises(ValueError, match="longer than max_positions=8"):
        engine.hidden_states([list(range(1, 10))])
    assert engine.hidden_states([]) == []
