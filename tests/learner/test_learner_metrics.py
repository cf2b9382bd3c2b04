"""The learner only gathers the metrics each algorithm axis returns (surrogate, correction, KL
estimator, aggregation), averaged over micro-batches weighted by their tokens."""

from __future__ import annotations

import textwrap

import pytest
import torch

from covey.algos import KL_ESTIMATORS
from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.logprobs import completion_logprobs
from covey.models import load
from covey.rollouts import Rollouts

USER = '''
def agg(loss_tok, mask, totals):
    """token mean that reports how many tokens each call saw"""
    return (loss_tok * mask).sum() / totals.num_tokens, {"agg/tokens_seen": float(mask.sum())}


def zero_kl(logp, ref_logp, mask):
    return (logp - ref_logp) * 0.0, {"kl/zero/calls": 1.0}
'''


@pytest.fixture(scope="module")
def tiny():
    model, _ = load("tiny-llama", seed=3, initializer_range=0.1)
    return model.float()


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "axis_metrics.py").write_text(textwrap.dedent(USER))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "axis_metrics"


def _batch(vocab: int) -> Rollouts:
    """Two prompts of 2 rows each; 3 + 2 and 4 + 1 real tokens (10 in all)."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, vocab, (4,), generator=g) for _ in range(2)]
    mask = (torch.arange(4)[None, :] < torch.tensor([3, 2, 4, 1])[:, None]).float()
    return Rollouts(
        prompt_ids=[prompts[i].clone() for i in (0, 0, 1, 1)],
        completion_ids=torch.randint(5, vocab, (4, 4), generator=g), completion_mask=mask,
        behaviour_logprobs=-torch.rand(4, 4, generator=g) * mask, group=torch.tensor([0, 0, 1, 1]),
        prompt_id=torch.tensor([0, 0, 1, 1]), advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]),
        ref_logprobs=-torch.rand(4, 4, generator=g) * mask,
    ).validate()  # fmt: skip


def test_aggregation_and_kl_metrics_are_gathered_token_weighted(tiny, user):
    algo = resolve_algo({"preset": "grpo", "aggregation": f"{user}:agg", "kl": {"name": f"{user}:zero_kl", "coef": 0.1}})
    learner = Learner(tiny, torch.optim.SGD(tiny.parameters(), lr=0.0), None, algo, temperature=1.0, max_new_tokens=4,
                      dtype="fp32", micro_batch_size=2)  # fmt: skip
    m = learner.update(_batch(tiny.config.vocab_size), torch.Generator().manual_seed(0))
    # micro-batches are the two prompt groups: 5 and 5 tokens -> each call saw 5
    assert m["agg/tokens_seen"] == pytest.approx(5.0) and m["kl/zero/calls"] == 1.0
    assert {"surrogate/clip_frac_low", "surrogate/clip_frac_high", "learn/loss", "learn/grad_norm"} <= set(m)


def test_kl_mean_is_the_estimators_masked_mean(tiny):
    algo = resolve_algo({"preset": "grpo", "kl": {"name": "low_var_kl", "coef": 0.04}})
    learner = Learner(tiny, torch.optim.SGD(tiny.parameters(), lr=0.0), None, algo, temperature=1.0, max_new_tokens=4,
                      dtype="fp32")  # fmt: skip
    batch = _batch(tiny.config.vocab_size)
    m = learner.update(batch, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logp, _ = completion_logprobs(tiny, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.0)
    _, want = KL_ESTIMATORS["low_var_kl"].fn(logp.float(), batch.ref_logprobs, batch.completion_mask)
    assert m["kl/mean"] == pytest.approx(want["kl/mean"], rel=1e-5)
    assert m["kl/low_var_kl/clamped"] == want["kl/low_var_kl/clamped"]
