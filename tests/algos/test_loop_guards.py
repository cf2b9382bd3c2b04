"""LOOP's rollout filter (|A| < 0.01 dropped) and high-KL early stop, against apple/ml-loop 6ade7b9
`_filter_rollouts` / `kl_estimate` / `_gradient_step`, by hand."""

from __future__ import annotations

import pytest
import torch

from covey.algos.loop import keep_large_advantages, trajectory_kl
from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.logprobs import completion_logprobs
from covey.models import load
from covey.rollouts import Rollouts


def test_loop_preset_sets_the_code_defaults_and_they_can_be_turned_off():
    cfg = resolve_algo({"preset": "loop"})
    assert cfg.abs_adv_threshold == 0.01 and cfg.high_kl_threshold == 20.0
    off = resolve_algo({"preset": "loop", "abs_adv_threshold": None, "high_kl_threshold": None})
    assert off.abs_adv_threshold is None and off.high_kl_threshold is None
    assert resolve_algo({"preset": "grpo"}).abs_adv_threshold is None
    with pytest.raises(ValueError):
        resolve_algo({"preset": "loop", "abs_adv_threshold": -0.1})
    with pytest.raises(ValueError):
        resolve_algo({"preset": "loop", "high_kl_threshold": 0})


def test_filter_keeps_abs_advantage_at_least_threshold():
    mask = torch.ones(5, 1)
    adv = torch.tensor([0.5, -0.005, 0.0, -0.02, 0.01])
    assert keep_large_advantages(adv, mask, 0.01).tolist() == [0, 3, 4]  # |A| >= 0.01 (ml-loop: >=)
    assert keep_large_advantages(adv, mask, 0.0).tolist() == [0, 1, 2, 3, 4]
    # nothing passes: ml-loop keeps n_keep = max(1, ...) rollouts, the largest |A| first
    assert keep_large_advantages(torch.tensor([0.0, -0.004, 0.003]), torch.ones(3, 1), 0.01).tolist() == [1]
    # token-level advantages: a row's largest |A| over its loss tokens (padding ignored)
    tok = torch.tensor([[0.0, 0.005, 0.9], [0.02, 0.0, 0.0]])
    tmask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert keep_large_advantages(tok, tmask, 0.01).tolist() == [1]


def test_trajectory_kl_is_minus_the_summed_log_ratio():
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5]])
    old = torch.tensor([[-1.5, -1.0, 0.0], [-0.5, -1.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # row 0: -(0.5 - 1.0) = 0.5; row 1: -(0 + 1.0 - 0.5) = -0.5
    assert trajectory_kl(logp, old, mask).tolist() == [0.5, -0.5]


@pytest.fixture(scope="module")
def tiny():
    model, _ = load("tiny-llama", seed=3, initializer_range=0.1)
    return model.float()


def _batch(vocab: int, advantages: list[float]) -> Rollouts:
    g = torch.Generator().manual_seed(0)
    n = len(advantages)
    return Rollouts(
        prompt_ids=[torch.randint(5, vocab, (3,), generator=g) for _ in range(n)],
        completion_ids=torch.randint(5, vocab, (n, 4), generator=g), completion_mask=torch.ones(n, 4),
        behaviour_logprobs=torch.zeros(n, 4), group=torch.zeros(n, dtype=torch.long),
        prompt_id=torch.zeros(n, dtype=torch.long), advantages=torch.tensor(advantages),
    ).validate()  # fmt: skip


def _learner(model, algo, lr=0.1):
    return Learner(model, torch.optim.SGD(model.parameters(), lr=lr), None, algo, temperature=1.0, max_new_tokens=4,
                   dtype="fp32", grad_clip=None)  # fmt: skip


def test_high_kl_skips_the_step_and_low_kl_takes_it(tiny):
    model = tiny
    batch = _batch(model.config.vocab_size, [1.0, -1.0])
    # pi_old = the behaviour log-probs (0: probability 1), one update: KL estimate = -mean_i sum_t log pi
    with torch.no_grad():
        logp = completion_logprobs(model, batch.prompt_ids, batch.completion_ids, batch.completion_mask, temperature=1.0)[0]
    want = float((-logp.sum(-1)).mean())
    assert want > 20  # 4 tokens of a random tiny model
    before = [p.detach().clone() for p in model.parameters()]
    m = _learner(model, resolve_algo({"preset": "loop"})).update(batch, torch.Generator().manual_seed(0))
    assert m["learn/high_kl_stop"] == 1.0 and m["learn/kl_estimate"] == pytest.approx(want, rel=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the step was skipped
    m = _learner(model, resolve_algo({"preset": "loop", "high_kl_threshold": want + 1})).update(batch, torch.Generator().manual_seed(0))
    assert m["learn/high_kl_stop"] == 0.0
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_filter_trains_only_the_kept_rows(tiny):
    """A batch with rows of |A| < 0.01 updates the model exactly as the batch of its other rows does."""
    state = {k: v.clone() for k, v in tiny.state_dict().items()}
    algo = resolve_algo({"preset": "loop", "high_kl_threshold": None})
    full = _batch(tiny.config.vocab_size, [1.0, 0.004, -1.0, 0.0])
    m = _learner(tiny, algo).update(full, torch.Generator().manual_seed(0))
    assert m["learn/adv_filtered_frac"] == 0.5
    after_full = [p.detach().clone() for p in tiny.parameters()]
    tiny.load_state_dict(state)
    kept = full.select(torch.tensor([0, 2]))
    _learner(tiny, resolve_algo({"preset": "loop", "abs_adv_threshold": None, "high_kl_threshold": None})).update(
        kept, torch.Generator().manual_seed(0))  # fmt: skip
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(after_full, tiny.parameters()))
    tiny.load_state_dict(state)
    # without the filter the near-zero rows count in the per-rollout mean: a different update
    _learner(tiny, resolve_algo({"preset": "loop", "abs_adv_threshold": None, "high_kl_threshold": None})).update(
        full, torch.Generator().manual_seed(0))  # fmt: skip
    assert not all(torch.allclose(a, b, atol=1e-7) for a, b in zip(after_full, tiny.parameters()))
    tiny.load_state_dict(state)
