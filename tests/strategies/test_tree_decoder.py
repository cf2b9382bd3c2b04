"""`TreeDecoder`: a forked KV cache gives the same log-probs as recomputing the prefix (prefill of
prompt + prefix, and the learner's teacher-forced log-probs), and counts decoded tokens honestly."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.learner import completion_logprobs
from covey.engine.base import Row
from covey.engine.tree import TreeDecoder
from covey.models import build_tiny


@pytest.fixture(scope="module")
def engine():
    model, tok = build_tiny("tiny-llama", seed=3)
    return TorchEngine(model, tok, dtype="fp32"), model, tok


def _prompts(tok):
    return [tok("12+7=")["input_ids"], tok("a much longer prompt: 3*4=")["input_ids"]]


def test_forked_cache_matches_recomputed_prefix(engine):
    eng, model, tok = engine
    sp = SamplingParams(seed=0, max_new_tokens=12, ignore_eos=True, temperature=0.9)
    dec = TreeDecoder(eng, sp)
    dec.add([Row(p, payload=(i,)) for i, p in enumerate(_prompts(tok))])
    dec.decode(4)
    dec.fork([0, 0, 0, 1, 1], payloads=[(0, j) for j in range(3)] + [(1, j) for j in range(2)])
    assert dec.decoded == 2 * 4
    dec.decode(5)
    forked = [r.copy() for r in dec.rows]
    assert dec.decoded == 2 * 4 + 5 * 5  # the shared 4-token prefixes were decoded once
    assert len({tuple(r.tokens) for r in forked}) == 5  # children diverge after the fork

    # Recompute: prefill prompt + the first 4 tokens, then force the same 5 continuation tokens.
    fresh = TreeDecoder(eng, sp)
    fresh.add([Row(r.prompt, tokens=r.tokens[:4], logprobs=r.logprobs[:4]) for r in forked])
    for k in range(4, 9):
        fresh.step(torch.tensor([r.tokens[k] for r in forked]))
    for a, b in zip(forked, fresh.rows):
        assert a.tokens == b.tokens
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)

    # And the learner's teacher-forced log-probs of the whole completion agree.
    ids = torch.tensor([r.tokens for r in forked])
    with torch.no_grad():
        lp, _ = completion_logprobs(model, [torch.tensor(r.prompt) for r in forked], ids, torch.ones_like(ids, dtype=torch.float32),
                                    temperature=0.9)  # fmt: skip
    torch.testing.assert_close(lp, torch.tensor([r.logprobs for r in forked]), atol=1e-4, rtol=0)


def test_rows_stop_and_a_longer_row_joins_later(engine):
    eng, model, tok = engine
    sp = SamplingParams(seed=1, max_new_tokens=6, ignore_eos=True)
    dec = TreeDecoder(eng, sp)
    dec.add([Row(_prompts(tok)[0])])
    done = dec.decode(3)
    assert not done and len(dec) == 1
    long_row = Row(_prompts(tok)[1], tokens=[40, 41, 42], logprobs=[0.0] * 3, versions=[0] * 3)
    dec.add([long_row])  # longer context than the current column: the cache shifts right
    finished = dec.decode(10)
    assert [len(r.tokens) for r in finished] == [6, 6] and all(r.finish_reason == "length" for r in finished)
    ids = torch.tensor([r.tokens for r in finished])
    with torch.no_grad():
        lp, _ = completion_logprobs(model, [torch.tensor(r.prompt) for r in finished], ids, torch.ones_like(ids, dtype=torch.float32))
    got = torch.tensor([r.logprobs for r in finished])
    torch.testing.assert_close(lp[0], got[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(lp[1, 3:], got[1, 3:], atol=1e-4, rtol=0)  # the carried 3 were given, not computed


def test_stop_token_ends_a_row(engine):
    eng, model, tok = engine
    stop = SamplingParams(seed=2, max_new_tokens=8, ignore_eos=True)
    dec = TreeDecoder(eng, stop)
    dec.add([Row(_prompts(tok)[0])])
    first = dec.decode(8)[0].tokens
    dec2 = TreeDecoder(eng, SamplingParams(seed=2, max_new_tokens=8, ignore_eos=True, stop_token_ids=(first[2],)))
    dec2.add([Row(_prompts(tok)[0])])
    out = dec2.decode(8)
    assert out[0].finish_reason == "stop" and out[0].tokens == first[: first.index(first[2]) + 1]
