"""trpa: hand-checked test vector, autograd equality with the released pairwise loss,
the no-pair fallback, edge cases."""

import pytest
import torch
from _make import rollouts

from covey.algos import ADVANTAGES
from covey.rollouts import RolloutsError


def run(batch, **params):
    return ADVANTAGES["trpa"].bind(params)(batch)


def batch_lv(levels, logp, ref, groups=None, **kw):
    """Accuracy column (unused by TRPA) and a 'level' column (weight 0); logp / ref per row."""
    acc = [1.0 if lv == 1 else 0.0 for lv in levels]
    return rollouts([[a, float(lv)] for a, lv in zip(acc, levels)], groups=groups, reward_names=["accuracy", "level"],
                    reward_weights=[1.0, 0.0], logprobs=logp, ref_logprobs=ref, **kw)  # fmt: skip


def released_loss(l, levels, groups, beta, anisotropy):
    """Transcription of compute_pairwise_policy_loss (pairs over distinct levels, fallback without beta)."""
    h = []
    for gid in sorted(set(groups)):
        rows = [i for i, x in enumerate(groups) if x == gid]
        lv = sorted({levels[i] for i in rows})
        for a in range(len(lv)):
            for b in range(a + 1, len(lv)):
                for i in [r for r in rows if levels[r] == lv[a]]:
                    for j in [r for r in rows if levels[r] == lv[b]]:
                        c = anisotropy if lv[a] == 1 else 1.0
                        h.append(c * beta * (l[i] - l[j]))
    if not h:
        s = torch.tensor([1.0 if x == 1 else -1.0 for x in levels], dtype=l.dtype)
        return -torch.nn.functional.logsigmoid(s * l).mean()
    return -torch.nn.functional.logsigmoid(torch.stack(h)).mean()


def test_spec_vector():
    # levels [1, 2, 1, 4], l = logp - ref = [0.10, -0.05, 0.02, 0.30] (ref 0): 5 pairs
    levels, l = [1, 2, 1, 4], [0.10, -0.05, 0.02, 0.30]
    res = run(batch_lv(levels, l, [0.0] * 4))
    assert torch.allclose(res.advantages, torch.tensor([0.2006, -0.1566, 0.2026, -0.2467]), atol=2e-4)
    assert res.metrics["adv/trpa/pairs"] == 5 and res.metrics["adv/trpa/fallback"] == 0
    lt = torch.tensor(l, dtype=torch.float64, requires_grad=True)
    loss = released_loss(lt, levels, [0] * 4, 0.1, 2.5)
    assert float(loss.detach()) == pytest.approx(0.7034, abs=1e-4)
    loss.backward()
    assert torch.allclose(lt.grad, torch.tensor([-0.0502, 0.0391, -0.0507, 0.0617], dtype=torch.float64), atol=1e-4)
    assert torch.allclose(res.advantages.double(), -4 * lt.grad, atol=1e-6)  # N_seq = 4


@pytest.mark.parametrize("beta, anisotropy", [(0.1, 2.5), (0.5, 1.0), (1.0, 4.0)])
def test_gradient_equals_the_released_loss_across_groups(beta, anisotropy):
    levels = [1, 2, 1, 4, 3, 3, 3, 2, 1, 4, 2]
    groups = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3]  # group 1: one level (no pair); group 3: one row
    logp = [-0.5, -1.0, -0.7, -0.2, -1.5, -0.3, -0.9, -1.1, -0.4, -0.8, -0.6]
    ref = [-0.6, -0.9, -0.8, -0.6, -1.2, -0.5, -0.9, -1.0, -0.7, -0.4, -0.5]
    res = run(batch_lv(levels, logp, ref, groups=groups, lengths=[3, 2, 4, 1, 2, 3, 4, 2, 3, 1, 2], width=4),
              beta=beta, anisotropy=anisotropy)  # fmt: skip
    lt = (torch.tensor(logp, dtype=torch.float64) - torch.tensor(ref, dtype=torch.float64)).requires_grad_()
    released_loss(lt, levels, groups, beta, anisotropy).backward()
    assert torch.allclose(res.advantages.double(), -len(levels) * lt.grad, atol=1e-6)


def test_fallback_when_the_batch_has_no_pair():
    levels, groups = [1, 1, 2, 2, 3], [0, 0, 1, 1, 2]  # one level per group; row 4 alone
    logp, ref = [-0.5, -1.0, -0.2, -0.9, -0.1], [-0.7, -0.8, -0.6, -0.9, -0.5]
    res = run(batch_lv(levels, logp, ref, groups=groups))
    assert res.metrics["adv/trpa/fallback"] == 1
    l = torch.tensor(logp[:4], dtype=torch.float64) - torch.tensor(ref[:4], dtype=torch.float64)
    s = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    want = torch.cat([(5 / 4) * (1 - torch.sigmoid(s * l)) * s, torch.zeros(1, dtype=torch.float64)])  # N_seq / N_f = 5/4
    assert torch.allclose(res.advantages.double(), want, atol=1e-6)
    # the same rows without the singleton: exactly the released fallback gradient
    four = batch_lv(levels[:4], logp[:4], ref[:4], groups=groups[:4])
    lt = l.clone().requires_grad_()
    released_loss(lt, levels[:4], groups[:4], 0.1, 2.5).backward()
    assert torch.allclose(run(four).advantages.double(), -4 * lt.grad, atol=1e-6)


def test_edge_cases():
    assert torch.equal(run(batch_lv([1, 2], [-0.5, -0.6], [-0.4, -0.4], groups=[3, 9])).advantages, torch.zeros(2))  # G = 1
    res = run(batch_lv([1, 2, 2, 1], [-0.5, -0.6, -0.7, -0.2], [-0.4] * 4, lengths=[3, 0, 3, 0], width=3))
    assert torch.equal(res.advantages[[1, 3]], torch.zeros(2)) and res.metrics["adv/trpa/pairs"] == 1  # empty rows: no pair
    assert res.advantages[0] > 0 > res.advantages[2]
    assert ADVANTAGES["trpa"].requires == ("ref_logprobs",)


def test_missing_inputs_are_clear_errors():
    with pytest.raises(RolloutsError, match=r"level_column='level' is not a reward column; columns are \['r0'\]"):
        run(rollouts([1.0, 0.0], ref_logprobs=-1.0))
    with pytest.raises(RolloutsError, match="rollouts.ref_logprobs"):
        run(rollouts([[1.0, 1.0], [0.0, 2.0]], reward_names=["accuracy", "level"]))
