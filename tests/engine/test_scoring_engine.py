"""ScoringEngine: the torch engine's log-probs of given completions equal its own sampling log-probs."""

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.engine.base import ScoringEngine
from covey.models import load


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scores_of_sampled_completions_equal_the_behaviour_logprobs(temperature):
    model, _ = load("tiny-llama", initializer_range=0.2, seed=3)
    engine = TorchEngine(model, dtype="fp32", prefill_rows=2)
    assert isinstance(engine, ScoringEngine)
    prompts = [[5, 6, 7], [9, 10]]
    gen = engine.generate(prompts, 2, SamplingParams(temperature=temperature, max_new_tokens=6, seed=1, ignore_eos=True))
    comps = [row[: int(m.sum())].tolist() for row, m in zip(gen.completion_ids, gen.completion_mask)]
    rows = [prompts[int(i)] for i in gen.prompt_index]
    scored = engine.score(rows, comps, temperature=temperature, top_k=3)
    for (lp, top), behaviour, m in zip(scored, gen.logprobs, gen.completion_mask):
        k = int(m.sum())
        assert torch.allclose(lp, behaviour[:k], atol=1e-4)
        assert top.shape == (k, 3) and bool((top[:, :-1] >= top[:, 1:]).all())  # sorted, largest first
        assert bool((lp <= top[:, 0] + 1e-6).all())  # no token beats the best one
        assert bool((torch.logsumexp(top, -1) <= 1e-6).all())  # the top k hold at most all the mass


def test_temperature_changes_the_scores_and_empty_completions_score_nothing():
    model, _ = load("tiny-llama", initializer_range=0.2, seed=3)
    engine = TorchEngine(model, dtype="fp32")
    hot, cold = engine.score([[5, 6]], [[7, 8]], temperature=2.0)[0][0], engine.score([[5, 6]], [[7, 8]])[0][0]
    assert not torch.allclose(hot, cold)
    lp, top = engine.score([[5, 6]], [[]], top_k=2)[0]
    assert lp.shape == (0,) and top.shape == (0, 2)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        engine.score([[5]], [[6]], temperature=0.0)
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        engine.score([[5], [6]], [[7]])
