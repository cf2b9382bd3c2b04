"""The learner with regularizers and the wave-2 inputs: the pre-pass makes micro-batching invisible
(same update as one micro-batch), logit statistics and pi_old's statistics reach LossInputs, group-
coupled components get whole groups, and regularizer metrics are logged."""

import copy

import pytest
import torch

from covey.algos import SURROGATES
from covey.algos.presets import resolve_algo
from covey.learner.learner import Learner
from covey.learner.logprobs import completion_logprobs_stats
from covey.models import load
from covey.rollouts import Rollouts

SEEN: list = []


def capture(inp, *, scale: float = 1.0):
    """A surrogate (import path) that records what the learner passed and acts like REINFORCE."""
    SEEN.append(inp)
    return -inp.advantages * inp.logp * scale, {}


capture.requires = ("stat:vocab_mean_logp", "stat:sum_p2", "group")


def _batch(vocab: int, seed: int = 0) -> Rollouts:
    """3 groups of 2 rows, ragged masks; pi_old = the engine's numbers, off the current policy."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, vocab, (n,), generator=g) for n in (4, 6, 3)]
    group = torch.tensor([0, 1, 2, 0, 1, 2])
    n, t = len(group), 6
    mask = torch.ones(n, t)
    mask[1, 4:] = 0
    mask[4, 2:] = 0
    return Rollouts(
        prompt_ids=[prompts[i].clone() for i in group.tolist()],
        completion_ids=torch.randint(5, vocab, (n, t), generator=g),
        completion_mask=mask,
        behaviour_logprobs=(-torch.rand(n, t, generator=g) * 3 - 2) * mask,
        group=group,
        prompt_id=group.clone(),
        rewards=torch.tensor([[1.0], [0.0], [1.0], [0.0], [1.0], [0.0]]),
        reward_names=("r",),
        advantages=torch.tensor([1.0, -1.0, 0.5, -1.0, 1.0, -0.5]),
    ).validate()


@pytest.fixture(scope="module")
def tiny():
    model, _ = load("tiny-llama", seed=3, initializer_range=0.1)
    return model.float()


def _update(model, algo, micro, batch, **kw):
    m = copy.deepcopy(model)
    learner = Learner(m, torch.optim.SGD(m.parameters(), lr=0.1), None, algo, temperature=1.0, max_new_tokens=6,
                      dtype="fp32", micro_batch_size=micro, grad_clip=None, **kw)  # fmt: skip
    metrics = learner.update(copy.deepcopy(batch), torch.Generator().manual_seed(0))
    return metrics, [p.detach() for p in m.parameters()], learner


@pytest.mark.parametrize("regs", [
    [{"name": "llds", "coef": 1.0}],
    [{"name": "r2vpo_provisional", "lambda0": 2.0}],
    [{"name": "disco_kl", "beta": 0.1, "delta": 0.0}],
    [{"name": "kl_old", "coef": 0.5}, {"name": "epo", "coef": 0.01}],
])  # fmt: skip
def test_pre_pass_makes_micro_batches_equal_one_big_batch(tiny, regs):
    algo = resolve_algo({"surrogate": {"name": "reinforce"}, "aggregation": {"name": "token-mean"}, "kl": None, "regularizers": regs})
    b = _batch(tiny.config.vocab_size)
    m_one, p_one, _ = _update(tiny, algo, None, b)
    m_mic, p_mic, _ = _update(tiny, algo, 2, b)
    name = regs[0]["name"]
    assert any(k.startswith(f"reg/{name}/") for k in m_one), sorted(m_one)
    moved = max(float((a - c).abs().max()) for a, c in zip(p_one, tiny.parameters()))
    assert moved > 0
    gap = max(float((a - c).abs().max()) for a, c in zip(p_one, p_mic))
    assert gap <= 1e-4 * moved + 1e-7, (gap, moved)  # fp32 summation order only
    assert m_one["learn/loss"] == pytest.approx(m_mic["learn/loss"], rel=1e-5, abs=1e-7)
    plain = resolve_algo({"surrogate": {"name": "reinforce"}, "aggregation": {"name": "token-mean"}, "kl": None})
    _, p_plain, _ = _update(tiny, plain, None, b)
    assert any(not torch.allclose(a, c, atol=1e-7) for a, c in zip(p_one, p_plain))  # the term changed the update


@pytest.mark.parametrize("mini_batches", [1, 3])
def test_statistics_old_statistics_groups_and_rows_reach_the_surrogate(tiny, mini_batches):
    path = f"{__file__}:capture"  # imported by file: a module of its own, whose SEEN list is read below
    algo = resolve_algo({"surrogate": {"name": path}, "kl": None})
    seen = SURROGATES.get(path).fn.__globals__["SEEN"]
    seen.clear()
    b = _batch(tiny.config.vocab_size)
    _, _, learner = _update(tiny, algo, 2, b, mini_batches=mini_batches)
    assert learner.objective.stats == ("sum_p2", "vocab_mean_logp") and learner.objective.need_group
    with torch.no_grad():
        _, _, ref = completion_logprobs_stats(tiny, b.prompt_ids, b.completion_ids, b.completion_mask,
                                              stats=("sum_p2", "vocab_mean_logp"))  # pi_old = the weights before the update
    rows_seen = 0
    for inp in seen:
        assert set(inp.stats) == {"sum_p2", "vocab_mean_logp"} and set(inp.old_stats) == set(inp.stats)
        assert inp.group is not None and len(torch.unique(inp.group)) * 2 == len(inp.group)  # whole groups of 2
        assert set(inp.row) == {"reward", "group_mean", "group_std", *(f"col:{n}" for n in b.reward_names)}
        assert inp.ref_logp is None  # this batch has no reference log-probs
        for j, gid in enumerate(inp.group.tolist()):
            rows = (b.group == gid).nonzero().flatten().tolist()
            assert float(inp.row["group_mean"][j]) == pytest.approx(float(b.rewards[rows, 0].mean()))
            assert float(inp.row["group_std"][j]) == pytest.approx(float(b.rewards[rows, 0].std()))
            col = inp.row[f"col:{b.reward_names[0]}"][inp.group == gid]  # the reward column, row by row
            assert sorted(col.tolist()) == pytest.approx(sorted(b.rewards[rows, 0].tolist()))
        rows_seen += len(inp.group)
        # pi_old's statistics: the recompute (several updates) or the current ones detached (one update)
        assert not inp.old_stats["sum_p2"].requires_grad
    assert rows_seen == len(b)
    first = seen[0]
    rows = [int(i) for i in range(len(b)) if b.group[i] in first.group.tolist()]
    order = sorted(rows, key=lambda i: (first.group.tolist().index(int(b.group[i])), i))
    want = ref["vocab_mean_logp"][order]
    assert torch.allclose(first.old_stats["vocab_mean_logp"], want.to(first.old_stats["vocab_mean_logp"].device), atol=1e-5)


def test_a_group_split_across_micro_batches_is_refused(tiny):
    algo = resolve_algo({"surrogate": {"name": "reg_grpo_provisional"}, "kl": None})
    with pytest.raises(ValueError, match="spans micro-batches"):
        _update(tiny, algo, 1, _batch(tiny.config.vocab_size))
