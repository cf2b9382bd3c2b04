"""`optim.skip_zero_advantage`: rows whose advantages are all 0 are left out of the forward/backward
passes. The update must be the one the full pass gives (the loss totals still count those rows), the
skip applies only where that holds, and every surrogate marked `zero_at_zero_advantage` really is zero,
with zero gradient, on a zero-advantage row whatever its ratios."""

import copy
import dataclasses

import pytest
import torch

from covey.algos import AGGREGATIONS, SURROGATES, LossInputs
from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.policy_loss import rows_with_signal
from covey.models import load
from covey.rollouts import Rollouts

MARKED = sorted(n for n in SURROGATES if SURROGATES[n].caps.zero_at_zero_advantage)


def _batch(vocab: int, adv: list[float], seed: int = 0, offpolicy_row: int | None = None) -> Rollouts:
    """4 groups of 2 rows (ragged masks); pi_old = the engine's numbers, off the current policy."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, vocab, (n,), generator=g) for n in (4, 6, 3, 5)]
    group = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    n, t = len(group), 6
    mask = torch.ones(n, t)
    mask[1, 4:] = 0
    mask[4, 2:] = 0
    off = None
    if offpolicy_row is not None:
        off = torch.zeros(n, t)
        off[offpolicy_row, 1:3] = 1
    return Rollouts(
        prompt_ids=[prompts[i].clone() for i in group.tolist()],
        completion_ids=torch.randint(5, vocab, (n, t), generator=g),
        completion_mask=mask,
        behaviour_logprobs=(-torch.rand(n, t, generator=g) * 3 - 2) * mask,
        group=group,
        prompt_id=group.clone(),
        rewards=torch.arange(n, dtype=torch.float32)[:, None] / n,
        reward_names=("r",),
        advantages=torch.tensor(adv),
        offpolicy_mask=off,
    ).validate()


# groups 1 and 3 (rows 1, 5 and 3, 7) have no signal
ADV = [1.0, 0.0, -0.5, 0.0, -1.0, 0.0, 0.5, 0.0]


@pytest.fixture(scope="module")
def tiny():
    model, _ = load("tiny-llama", seed=3, initializer_range=0.1)
    return model.float()


def _update(model, algo, batch, skip, opt="sgd", micro=None, steps=1):
    m = copy.deepcopy(model)
    o = torch.optim.SGD(m.parameters(), lr=0.1) if opt == "sgd" else torch.optim.AdamW(m.parameters(), lr=0.01)
    learner = Learner(m, o, None, algo, temperature=1.0, max_new_tokens=6, dtype="fp32", micro_batch_size=micro,
                      grad_clip=None, skip_zero_advantage=skip)  # fmt: skip
    metrics = [learner.update(copy.deepcopy(b), torch.Generator().manual_seed(0)) for b in (batch if steps > 1 else [batch])]
    return metrics[-1], [p.detach().clone() for p in m.parameters()], learner


def _gap(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def test_rows_with_signal_reads_advantages_masks_and_offpolicy_tokens():
    b = _batch(50, ADV)
    assert rows_with_signal(b, b.loss_mask()).tolist() == [0, 2, 4, 6]
    # a nonzero advantage on a masked token only is no signal: row 4 has tokens 0..1
    tok = b.advantages[:, None].expand(8, 6).clone()
    tok[4, :2] = 0.0
    b2 = dataclasses.replace(b, advantages=tok)
    assert rows_with_signal(b2, b2.loss_mask()).tolist() == [0, 2, 6]
    # tokens another model wrote keep their row (LUFFY's loss on them)
    b3 = _batch(50, ADV, offpolicy_row=5)
    assert rows_with_signal(b3, b3.loss_mask()).tolist() == [0, 2, 4, 5, 6]


CASES = [(s, "token-mean") for s in MARKED] + [("ppo_clip", a) for a in sorted(AGGREGATIONS) if a != "token-mean"]


@pytest.mark.parametrize("surrogate,aggregation", CASES)
def test_skipping_gives_the_full_update(tiny, surrogate, aggregation):
    algo = resolve_algo({"surrogate": {"name": surrogate}, "aggregation": {"name": aggregation}, "kl": None})
    if algo.regularizers:  # r2vpo needs its regularizer, which turns the skip off (tested below)
        pytest.skip("needs a regularizer")
    b = _batch(tiny.config.vocab_size, ADV)
    m_full, p_full, l_full = _update(tiny, algo, b, skip=False)
    m_skip, p_skip, l_skip = _update(tiny, algo, b, skip=True, micro=2)
    assert l_skip.objective.skip_zero_rows and not l_full.objective.skip_zero_rows
    assert m_skip["learn/skipped_rows"] == pytest.approx(0.5) and "learn/skipped_rows" not in m_full
    moved = _gap(p_full, tiny.parameters())
    assert moved > 1e-4  # the update moved the weights ...
    assert _gap(p_full, p_skip) < 1e-4 * moved  # ... and skipping moved them the same way (float32 sums)
    assert m_skip["learn/loss"] == pytest.approx(m_full["learn/loss"], rel=1e-5, abs=1e-6)
    assert m_skip["learn/grad_norm"] == pytest.approx(m_full["learn/grad_norm"], rel=1e-5)


def test_an_all_zero_batch_still_steps_the_optimizer_like_the_full_pass(tiny):
    """AdamW moves the weights on a zero gradient (momentum): skipping every row must do the same."""
    algo = resolve_algo({"surrogate": {"name": "ppo_clip"}, "aggregation": {"name": "token-mean"}, "kl": None})
    # step 1 has signal in every row (nothing skipped: both learners compute the same gradient bit for
    # bit, so Adam's per-element normalisation cannot amplify float noise); step 2 has none
    signal = [1.0, -0.5, 0.25, -1.0, 0.5, 1.0, -0.25, -1.0]
    batches = [_batch(tiny.config.vocab_size, signal), _batch(tiny.config.vocab_size, [0.0] * 8, seed=1)]
    m_full, p_full, _ = _update(tiny, algo, batches, skip=False, opt="adamw", steps=2)
    m_skip, p_skip, _ = _update(tiny, algo, batches, skip=True, opt="adamw", steps=2)
    assert m_skip["learn/skipped_rows"] == 1.0
    assert m_full["learn/grad_norm"] == 0.0 and m_skip["learn/grad_norm"] == 0.0
    _, p_one, _ = _update(tiny, algo, batches[0], skip=False, opt="adamw")
    assert _gap(p_full, p_one) > 1e-5  # the second (zero-gradient) step moved the weights ...
    assert _gap(p_full, p_skip) == 0.0  # ... and the skipping learner moved them the same way


@pytest.mark.parametrize("algo", [
    {"surrogate": {"name": "ppo_clip"}, "kl": {"name": "k3", "coef": 0.1, "mode": "loss"}},
    {"surrogate": {"name": "ppo_clip"}, "kl": None, "entropy_coef": 0.01},
    {"surrogate": {"name": "ppo_clip"}, "kl": None, "regularizers": [{"name": "llds", "coef": 1.0}]},
    {"surrogate": {"name": "hapo"}, "kl": None},
    {"surrogate": {"name": "ppo_clip"}, "kl": None, "high_kl_threshold": 20.0},  # LOOP's KL mean over all rows
    {"surrogate": {"name": "reg_grpo_provisional"}, "kl": None},
])  # fmt: skip
def test_no_skip_where_a_zero_advantage_row_still_counts(tiny, algo):
    a = resolve_algo(algo)
    learner = Learner(copy.deepcopy(tiny), torch.optim.SGD(tiny.parameters(), lr=0.0), None, a, temperature=1.0,
                      max_new_tokens=6, dtype="fp32")  # fmt: skip
    assert not learner.objective.skip_zero_rows


def test_marked_surrogates_are_zero_with_zero_gradient_on_zero_advantage_rows():
    """Probe each mark: wide ratios (|log r| up to 4), ragged masks, rows with and without advantage."""
    g = torch.Generator().manual_seed(0)
    n, t = 6, 5
    mask = torch.ones(n, t)
    mask[2, 3:] = 0
    old = -torch.rand(n, t, generator=g) * 3 - 0.5
    adv_row = torch.tensor([1.0, 0.0, -2.0, 0.0, 0.0, 0.7])
    for name in MARKED:
        logp = (old + (torch.rand(n, t, generator=g) * 8 - 4)).clamp(max=-1e-3).requires_grad_()
        rows = {"reward": torch.rand(n, generator=g), "group_mean": torch.rand(n, generator=g), "group_std": torch.rand(n, generator=g)}
        inp = LossInputs(logp, old, adv_row[:, None] * mask, mask, torch.rand(n, t, generator=g), {}, {}, None, rows, None)
        loss_tok, _ = SURROGATES.get(name).bind({})(inp)
        (loss_tok * mask).sum().backward()
        zero = adv_row == 0
        assert float((loss_tok.detach()[zero] * mask[zero]).abs().max()) == 0.0, name
        assert float(logp.grad[zero].abs().max()) == 0.0, name
        assert float(logp.grad[~zero].abs().max()) > 0.0, name  # and the probe can see a gradient
    assert {"ppo_clip", "gspo", "cispo", "sapo"} <= set(MARKED) and "hapo" not in MARKED
