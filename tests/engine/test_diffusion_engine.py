"""The masked_diffusion engine's unmasking schedule against hand-computed cases (LLaDA generate.py)."""

from types import SimpleNamespace

import pytest
import torch

from covey.engine import ENGINES, SamplingParams
from covey.engine.diffusion import MaskedDiffusionEngine, transfer_counts
from covey.models import load


class Stub(torch.nn.Module):
    """Position i predicts token `tok(i)` with logit i (later positions are more confident); V = 8,
    mask 7, EOS 6, pad 0. Every forward's input is recorded."""

    def __init__(self, tok=lambda i: 1 + i % 5):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(is_causal=False, mask_token_id=7, eos_token_id=6, model_type="stub")
        self.tok, self.seen = tok, []

    def forward(self, input_ids, attention_mask=None):
        self.seen.append(input_ids.clone())
        b, s = input_ids.shape
        logits = torch.zeros(b, s, 8)
        for i in range(s):
            logits[:, i, self.tok(i)] = float(i)
        return SimpleNamespace(logits=logits)


TOK = SimpleNamespace(pad_token_id=0, eos_token_id=6, mask_token_id=7)


def test_transfer_counts_vectors():
    assert transfer_counts(10, 4) == [3, 3, 2, 2]
    assert transfer_counts(7, 3) == [3, 2, 2]
    assert transfer_counts(2, 4) == [1, 1, 0, 0]
    # the d1 training setting: gen 256, block 32, steps 128 -> 8 blocks x 16 steps x 2 tokens
    eng = MaskedDiffusionEngine(Stub(), TOK, block_length=32, steps=128)
    block, steps_b = eng.plan(256)
    assert (256 // block, steps_b, transfer_counts(block, steps_b)) == (8, 16, [2] * 16)
    with pytest.raises(ValueError, match="must divide"):
        eng.plan(100)
    with pytest.raises(ValueError, match="multiple of the number of blocks"):
        MaskedDiffusionEngine(Stub(), TOK, block_length=2, steps=3).plan(4)


def test_low_confidence_schedule_by_hand():
    # prompt of 2 tokens, canvas 4, blocks of 2, 4 steps: 2 blocks x 2 steps x 1 token.
    # confidence grows with the position, so each block reveals its right token first.
    stub = Stub()
    eng = MaskedDiffusionEngine(stub, TOK, block_length=2, steps=4)
    g = eng.generate([[1, 2]], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert g.completion_ids.tolist() == [[3, 4, 5, 1]]  # tok(i) = 1 + i % 5 at absolute positions 2..5
    assert g.unmask_step.tolist() == [[1, 0, 3, 2]]
    # what the model saw at each step: nothing outside the current block changes
    assert [x[0, 2:].tolist() for x in stub.seen] == [[7, 7, 7, 7], [7, 4, 7, 7], [3, 4, 7, 7], [3, 4, 7, 1]]
    assert g.completion_mask.tolist() == [[1, 1, 1, 1]] and g.finish_reason == ["length"]
    assert torch.equal(g.logprobs, torch.zeros(1, 4))
    # one step per block reveals the whole block at once
    g = MaskedDiffusionEngine(Stub(), TOK, block_length=2, steps=2).generate([[1, 2]], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert g.unmask_step.tolist() == [[0, 0, 1, 1]]
    # one block, 3 steps over 4 tokens: split(4, 3) = [2, 1, 1], most confident first
    g = MaskedDiffusionEngine(Stub(), TOK, steps=3).generate([[1, 2]], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert g.unmask_step.tolist() == [[2, 1, 0, 0]]


def test_eos_mask_and_eos_options():
    stub = Stub(tok=lambda i: 6 if i == 3 else 1 + i % 5)  # completion token 1 is EOS
    g = MaskedDiffusionEngine(stub, TOK, block_length=4, steps=4).generate([[1, 2]], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert g.completion_ids.tolist() == [[3, 6, 5, 1]]
    assert g.completion_mask.tolist() == [[1, 1, 0, 0]] and g.finish_reason == ["stop"]
    assert g.unmask_step.tolist() == [[3, 2, 1, 0]]
    # EOS revealed last; with its logit -inf never sampled at all
    g = MaskedDiffusionEngine(Stub(tok=lambda i: 6 if i == 3 else 1 + i % 5), TOK, steps=4, confidence_eos_eot_inf=True).generate(
        [[1, 2]], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert g.unmask_step.tolist() == [[2, 3, 1, 0]]
    g = MaskedDiffusionEngine(Stub(tok=lambda i: 6 if i == 3 else 1 + i % 5), TOK, steps=4, logits_eos_inf=True).generate(
        [[1, 2]], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert 6 not in g.completion_ids.tolist()[0] and g.finish_reason == ["length"]


def test_refusals():
    eng = MaskedDiffusionEngine(Stub(), TOK)
    for sp in (SamplingParams(max_new_tokens=4, top_p=0.9), SamplingParams(max_new_tokens=4, stop_strings=("x",)),
               SamplingParams(max_new_tokens=4, prompt_max_new_tokens=(2,))):
        with pytest.raises(ValueError, match="masked_diffusion"):
            eng.generate([[1, 2]], 1, sp)
    with pytest.raises(ValueError, match="pad id equals the mask id"):
        MaskedDiffusionEngine(Stub(), SimpleNamespace(pad_token_id=7, eos_token_id=6, mask_token_id=7))


@pytest.fixture(scope="module")
def llada():
    return load("tiny-llada")


def test_tiny_llada_seeded_blockwise(llada):
    model, tok = llada
    eng = ENGINES.build("masked_diffusion", {"block_length": 4, "steps": 4}, model, tok)
    sp = SamplingParams(max_new_tokens=8, seed=3, temperature=1.0)
    a = eng.generate([[1, 2, 3], [4, 5]], 2, sp)  # two prompt lengths: batched separately
    b = eng.generate([[1, 2, 3], [4, 5]], 2, sp)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.unmask_step, b.unmask_step)
    assert a.prompt_index.tolist() == [0, 0, 1, 1] and [len(p) for p in a.prompt_ids] == [3, 3, 2, 2]
    assert not (a.completion_ids == tok.mask_token_id).any()
    # 2 blocks x 2 steps x 2 tokens: block 0 revealed at steps 0-1, block 1 at steps 2-3, two per step
    for row in a.unmask_step.tolist():
        assert sorted(row[:4]) == [0, 0, 1, 1] and sorted(row[4:]) == [2, 2, 3, 3]
    assert (a.reveal_logprob < 0).all()
    c = eng.generate([[1, 2, 3], [4, 5]], 2, SamplingParams(max_new_tokens=8, seed=4))
    assert not torch.equal(a.completion_ids, c.completion_ids)
    # greedy: the seed does not matter, and it equals temperature-free argmax decoding
    g1 = eng.generate([[1, 2, 3]], 1, SamplingParams(max_new_tokens=8, seed=1, greedy=True))
    g2 = eng.generate([[1, 2, 3]], 1, SamplingParams(max_new_tokens=8, seed=2, greedy=True))
    assert torch.equal(g1.completion_ids, g2.completion_ids)
