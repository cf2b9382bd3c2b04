"""etr_provisional, reg_grpo_provisional, rover (surrogate and advantage): the spec's vectors, gradients and edge cases."""

import pytest
import torch

from covey.algos import ADVANTAGES, SURROGATES, LossInputs

from _make import rollouts


def leaf(x):
    return torch.tensor(x, dtype=torch.float64).requires_grad_(True)


# ---------------------------------------------------------------------------- etr (§2.7)
def etr_inputs(ratio, adv, group_std):
    ratio = torch.tensor(ratio, dtype=torch.float64)
    logp = ratio.log().requires_grad_(True)
    adv = torch.tensor(adv, dtype=torch.float64)[:, None].expand_as(ratio).clone()
    n = ratio.shape[0]
    return LossInputs(logp, torch.zeros_like(ratio), adv, torch.ones_like(ratio),
                      row={"group_std": torch.full((n,), group_std, dtype=torch.float64)})  # fmt: skip


def test_etr_spec_bounds_one_correct_of_four():
    # r = [1, 0, 0, 0]: A = [1.5, -0.5, -0.5, -0.5], sigma 0.5 -> eps_high [0.49, 0.35, ...], eps_low [0.35, 0.25, ...]
    adv = [1.5, -0.5, -0.5, -0.5]
    _, m = SURROGATES["etr_provisional"].fn(etr_inputs([[1.0]] * 4, adv, 0.5))
    assert m["surrogate/eps_scale_mean"] == pytest.approx((1.75 + 3 * 1.25) / 4)
    # just inside / just outside each bound: the loss is -A r inside, -A (1 +- eps) outside
    inside = etr_inputs([[1.489], [0.751], [0.751], [0.751]], adv, 0.5)
    loss, _ = SURROGATES["etr_provisional"].fn(inside)
    assert torch.allclose(loss[:, 0], torch.tensor([-1.5 * 1.489, 0.5 * 0.751, 0.5 * 0.751, 0.5 * 0.751], dtype=torch.float64))
    outside = etr_inputs([[1.6], [0.7], [0.7], [0.7]], adv, 0.5)
    loss, m = SURROGATES["etr_provisional"].fn(outside)
    assert torch.allclose(loss[:, 0], torch.tensor([-1.5 * 1.49, 0.5 * 0.75, 0.5 * 0.75, 0.5 * 0.75], dtype=torch.float64))
    (g,) = torch.autograd.grad(loss.sum(), outside.logp)
    assert torch.all(g == 0) and m["surrogate/clip_frac"] == 1.0


def test_etr_spec_bounds_two_of_four_and_kappa_zero_is_ppo_clip():
    # r = [1, 1, 0, 0]: A = +-0.866, sigma 0.5774 -> eps_high 0.42, eps_low 0.30 for every row
    adv, std = [0.8660254, 0.8660254, -0.8660254, -0.8660254], 0.5773503
    loss, _ = SURROGATES["etr_provisional"].fn(etr_inputs([[1.5], [1.41], [0.6], [0.71]], adv, std))
    want = [-0.8660254 * 1.42, -0.8660254 * 1.41, 0.8660254 * 0.70, 0.8660254 * 0.71]
    assert torch.allclose(loss[:, 0], torch.tensor(want, dtype=torch.float64), atol=1e-6)
    inp = etr_inputs([[1.5, 0.6], [0.9, 1.2]], [1.0, -1.0], 0.7)
    a, _ = SURROGATES["etr_provisional"].fn(inp, kappa=0.0)
    b, _ = SURROGATES["ppo_clip"].fn(inp, eps_low=0.2, eps_high=0.28)
    assert torch.allclose(a, b)


def test_etr_needs_the_row_values():
    inp = etr_inputs([[1.0]], [1.0], 0.5)
    inp.row = {}
    with pytest.raises(ValueError, match="group_std"):
        SURROGATES["etr_provisional"].fn(inp)


# ---------------------------------------------------------------------------- reg_grpo (§2.25)
def test_reg_grpo_spec_vector_and_gradient():
    l_seq = torch.tensor([0.02, -0.01, 0.0, 0.03], dtype=torch.float64)
    logp = l_seq[:, None].expand(4, 2).clone().requires_grad_(True)  # two tokens per row, each with log-ratio l_i
    adv = torch.tensor([0.866, -0.866, -0.866, 0.866], dtype=torch.float64)[:, None].expand(4, 2).clone()
    inp = LossInputs(logp, torch.zeros(4, 2, dtype=torch.float64), adv, torch.ones(4, 2, dtype=torch.float64), group=torch.zeros(4, dtype=torch.long))
    loss, m = SURROGATES["reg_grpo_provisional"].fn(inp)
    assert torch.all(loss == loss[:, :1])  # one value per row
    assert float(loss[:, 0].mean()) == pytest.approx(0.0770, abs=1e-4)
    assert m["surrogate/ahat_abs_mean"] == pytest.approx((0.5477 + 1.0954 + 0.5477 + 1.0954) / 4, abs=1e-4)
    # autograd against a direct transcription (gradient passes through the std)
    x = l_seq.clone().requires_grad_(True)
    ahat = (x - x.mean()) / (x.std() + 1e-6)
    ref = ((ahat - adv[:, 0]) ** 2).mean()
    (gx,) = torch.autograd.grad(ref, x)
    (g,) = torch.autograd.grad(loss[:, 0].mean(), logp)
    assert torch.allclose(g.sum(-1), gx, atol=1e-6)  # d l_i / d logp_it = 1/2 per token, two tokens


def test_reg_grpo_first_on_policy_gradient_is_a_reinforce_step_of_size_one_over_eps():
    # l = 0 (pi = pi_old): std s = sqrt(0 + 1e-20) = 1e-10 and d loss / d l_j = -(2/N) (A_j - mean A) / (s + eps):
    # A = [1, -1], N = 2 -> -+1 / (1e-6 + 1e-10) = -+999900 (one token per row: d l / d logp = 1). The logged
    # learn/grad_norm is this pre-clip size; optim.grad_clip (1.0) bounds the step actually taken.
    inp = LossInputs(leaf([[0.0], [0.0]]), torch.zeros(2, 1, dtype=torch.float64), torch.tensor([[1.0], [-1.0]], dtype=torch.float64),
                     torch.ones(2, 1, dtype=torch.float64), group=torch.tensor([0, 0]))  # fmt: skip
    loss, _ = SURROGATES["reg_grpo_provisional"].fn(inp)
    (g,) = torch.autograd.grad(loss[:, 0].mean(), inp.logp)
    assert g[:, 0].tolist() == pytest.approx([-1 / (1e-6 + 1e-10), 1 / (1e-6 + 1e-10)], rel=1e-6)


def test_reg_grpo_groups_are_separate_and_singletons_and_empty_rows_get_zero():
    logp = leaf([[0.1], [0.3], [0.2], [0.5], [0.9]])
    mask = torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.0]], dtype=torch.float64)
    adv = torch.zeros(5, 1, dtype=torch.float64)
    inp = LossInputs(logp, torch.zeros(5, 1, dtype=torch.float64), adv, mask, group=torch.tensor([7, 7, 3, 3, 3]))
    _, _ = SURROGATES["reg_grpo_provisional"].fn(inp)
    loss, _ = SURROGATES["reg_grpo_provisional"].fn(inp)
    # group 7: l = [0.1, 0.3] -> ahat = +-0.7071; group 3 keeps rows 2, 3 (row 4 is empty): +-0.7071
    assert torch.allclose(loss[:4, 0], torch.full((4,), 0.5, dtype=torch.float64), atol=1e-5)
    assert float(loss[4, 0]) == 0.0
    single = LossInputs(leaf([[0.4]]), torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                        torch.ones(1, 1, dtype=torch.float64), group=torch.tensor([0]))  # fmt: skip
    loss, _ = SURROGATES["reg_grpo_provisional"].fn(single)
    assert float(loss) == pytest.approx(1.0)  # ahat = 0 for a group of one: (0 - A)^2
    on_policy = LossInputs(leaf([[0.0], [0.0]]), torch.zeros(2, 1, dtype=torch.float64), torch.tensor([[1.0], [-1.0]], dtype=torch.float64),
                           torch.ones(2, 1, dtype=torch.float64), group=torch.tensor([0, 0]))  # fmt: skip
    loss, _ = SURROGATES["reg_grpo_provisional"].fn(on_policy)
    (g,) = torch.autograd.grad(loss.sum(), on_policy.logp)
    assert torch.isfinite(g).all() and float(g[0, 0]) < 0 < float(g[1, 0])  # ~ -2 A / eps: REINFORCE's direction
    inp.group = None
    with pytest.raises(ValueError, match="LossInputs.group"):
        SURROGATES["reg_grpo_provisional"].fn(inp)


# ---------------------------------------------------------------------------- rover (§2.23)
def rover_inputs(logp, old, adv, u_cur, u_old, mask=None):
    logp = leaf(logp)
    old = torch.tensor(old, dtype=torch.float64)
    mask = torch.ones_like(old) if mask is None else torch.tensor(mask, dtype=torch.float64)
    adv = torch.full_like(old, adv)
    return LossInputs(logp, old, adv, mask, stats={"vocab_mean_logp": torch.tensor(u_cur, dtype=torch.float64)},
                      old_stats={"vocab_mean_logp": torch.tensor(u_old, dtype=torch.float64)})  # fmt: skip


def test_rover_spec_vector():
    inp = rover_inputs([[-1.0, -0.5, -2.0]], [[-1.2, -0.5, -1.5]], 0.8, [[-5.0, -6.0, -4.0]], [[-5.2, -5.9, -4.0]])
    loss, m = SURROGATES["rover"].fn(inp)
    assert float(loss.mean()) == pytest.approx(0.86, abs=1e-9)
    (g,) = torch.autograd.grad(loss.mean(), inp.logp)
    assert torch.allclose(g, torch.tensor([[-0.3333, -0.5333, -0.8667]], dtype=torch.float64), atol=1e-4)
    assert m["surrogate/next_mean"] == pytest.approx(-0.1 / 3)
    # on-policy: Q = 0, next = 0 -> loss A^2 = 0.64, gradient 2 (0 - A) / 3 per token
    on = rover_inputs([[-1.0, -0.5, -2.0]], [[-1.0, -0.5, -2.0]], 0.8, [[-5.0, -6.0, -4.0]], [[-5.0, -6.0, -4.0]])
    loss, _ = SURROGATES["rover"].fn(on)
    (g,) = torch.autograd.grad(loss.mean(), on.logp)
    assert float(loss.mean()) == pytest.approx(0.64) and torch.allclose(g, torch.full_like(g, -0.5333), atol=1e-4)


def test_rover_next_state_masking_scale_and_clip():
    # the next state of the last real token is padding: no next value there
    inp = rover_inputs([[-1.0, -1.0, 0.0]], [[-1.0, -1.0, 0.0]], 0.0, [[0.0, -2.0, -9.0]], [[0.0, -1.0, 0.0]], mask=[[1, 1, 0]])
    loss, _ = SURROGATES["rover"].fn(inp)
    assert torch.allclose(loss[0, :2], torch.tensor([1.0, 0.0], dtype=torch.float64))  # target [-1, 0]: Q = 0
    loss, _ = SURROGATES["rover"].fn(inp, next_scale=0.5)
    assert float(loss[0, 0]) == pytest.approx(0.25)
    loss, _ = SURROGATES["rover"].fn(inp, target_adv_only=True)
    assert float(loss[0, :2].sum()) == 0.0
    # clip 0.2: Q = log 1.5 > log 1.2 and target 1 > Q -> Q := log 1.2, no gradient
    clip = rover_inputs([[0.405465]], [[0.0]], 1.0, [[0.0]], [[0.0]])
    loss, m = SURROGATES["rover"].fn(clip, clip=0.2)
    (g,) = torch.autograd.grad(loss.sum(), clip.logp)
    assert float(loss) == pytest.approx((torch.log(torch.tensor(1.2)).item() - 1.0) ** 2, abs=1e-6)
    assert float(g) == 0.0 and m["surrogate/clip_frac"] == 1.0
    inp.stats = {}
    with pytest.raises(ValueError, match="vocab_mean_logp"):
        SURROGATES["rover"].fn(inp)


def test_rover_advantage_spec_vector():
    out = ADVANTAGES["rover"].bind({})(rollouts([1, 0, 0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2, 3, 3]))
    want = torch.tensor([3.75, -0.5, -0.5, 3.75, -0.5, -0.5, -0.5, -0.5])
    assert torch.allclose(out.advantages, want) and out.metrics["adv/rover/success_frac"] == 0.25
    all_right = ADVANTAGES["rover"].bind({})(rollouts([1, 1], [0, 0]))
    none_right = ADVANTAGES["rover"].bind({})(rollouts([0, 0], [0, 0]))
    assert torch.all(all_right.advantages == 0) and torch.all(none_right.advantages == 0)
    custom = ADVANTAGES["rover"].bind({"pos": 1.0, "neg": 1.0})(rollouts([1, 0, 0, 0], [0, 0, 1, 1]))
    assert torch.allclose(custom.advantages, torch.tensor([0.75, -0.25, -0.25, -0.25]))
