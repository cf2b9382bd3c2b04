"""Surrogates: hand-computed vectors, gradients and edge cases."""

import math

import pytest
import torch

from covey.algos import AGGREGATIONS, SURROGATES, BatchTotals, LossInputs
from covey.algos.aggregation import batch_totals


def inputs(ratio, adv, mask=None, old=-1.0, entropy=None):
    """LossInputs whose token ratios are `ratio` (logp = old + log ratio); logp is a leaf with grad."""
    ratio = torch.as_tensor(ratio, dtype=torch.float32)
    ratio = ratio if ratio.dim() == 2 else ratio[None]
    old_logp = torch.full_like(ratio, old)
    logp = (old_logp + ratio.log()).requires_grad_(True)
    adv = torch.as_tensor(adv, dtype=torch.float32).expand_as(ratio).clone()
    mask = torch.ones_like(ratio) if mask is None else torch.as_tensor(mask, dtype=torch.float32)
    return LossInputs(logp=logp, old_logp=old_logp, advantages=adv, mask=mask, entropy=entropy)


def grad_of(loss, inp):
    (g,) = torch.autograd.grad(loss.sum(), inp.logp)
    return g


# ---------------------------------------------------------------------------- ppo_clip (§2.1)
SPEC_2_1 = [  # A, ratio, loss, clipped (zero gradient)
    (+1.0, 1.5, -1.28, True),   # -min(1.5, 1.28) = -1.28
    (+1.0, 0.5, -0.5, False),
    (-1.0, 0.5, 0.8, True),     # max(0.5, 0.8)
    (-1.0, 1.5, 1.5, False),
    (-1.0, 5.0, 3.0, True),     # dual clip: min(max(5, 1.28), 3) = 3
    (+1.0, 1.1, -1.1, False),
]


def test_ppo_clip_matches_spec_table_with_clip_higher_and_dual_clip():
    ppo = SURROGATES["ppo_clip"].bind({"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 3.0})
    adv = [a for a, _, _, _ in SPEC_2_1]
    ratio = [r for _, r, _, _ in SPEC_2_1]
    inp = inputs(ratio, adv)
    loss, metrics = ppo(inp)
    assert torch.allclose(loss[0], torch.tensor([row[2] for row in SPEC_2_1]), atol=1e-6)
    # unclipped tokens: d(-A r)/d logp = -A r; clipped tokens: exactly zero
    expected = torch.tensor([0.0 if clipped else -a * r for a, r, _, clipped in SPEC_2_1])
    grad = grad_of(loss, inp)[0]
    assert torch.equal(grad == 0, expected == 0)
    assert torch.allclose(grad, expected, atol=1e-6)
    assert metrics["surrogate/clip_frac"] == pytest.approx(3 / 6)
    assert metrics["surrogate/clip_frac_high"] == pytest.approx(1 / 6)
    assert metrics["surrogate/clip_frac_low"] == pytest.approx(1 / 6)
    assert metrics["surrogate/clip_frac_dual"] == pytest.approx(1 / 6)
    assert metrics["surrogate/ratio_max"] == pytest.approx(5.0, rel=1e-6)


def test_dapo_dual_clip_ten_lets_ratio_five_through():
    loss, _ = SURROGATES["ppo_clip"].bind({"eps_high": 0.28, "dual_clip": 10.0})(inputs([5.0], [-1.0]))
    assert loss.item() == pytest.approx(5.0, rel=1e-6)


def test_ppo_clip_default_has_no_dual_clip():
    loss, metrics = SURROGATES["ppo_clip"].fn(inputs([5.0], [-1.0]))
    assert loss.item() == pytest.approx(5.0, rel=1e-6)
    assert "surrogate/clip_frac_dual" not in metrics


def test_delta_caps_the_unclipped_branch_two_sided():
    # TRL delta=2: A=-1, r=5 -> max(-A*min(5,2), -A*clip(5)) = max(2, 1.2) = 2 with zero gradient
    inp = inputs([5.0, 1.5], [-1.0, -1.0])
    loss, metrics = SURROGATES["ppo_clip"].fn(inp, delta=2.0)
    assert torch.allclose(loss[0], torch.tensor([2.0, 1.5]), atol=1e-6)
    assert torch.allclose(grad_of(loss, inp)[0], torch.tensor([0.0, 1.5]), atol=1e-6)
    assert metrics["surrogate/clip_frac_delta"] == pytest.approx(0.5)


def test_log_ratio_clamp_bounds_the_ratio_and_can_be_disabled():
    # A = -1 without dual clip: loss = max(r, clip(r)) = r, so the loss shows the ratio used
    inp = inputs([math.exp(25.0)], [-1.0])
    clamped, _ = SURROGATES["ppo_clip"].fn(inp)
    free, _ = SURROGATES["ppo_clip"].fn(inp, log_ratio_clamp=None)
    assert clamped.item() == pytest.approx(math.exp(20.0), rel=1e-5)
    assert free.item() == pytest.approx(math.exp(25.0), rel=1e-4)


def test_clip_metrics_ignore_masked_tokens():
    inp = inputs([[1.0, 100.0]], [1.0], mask=[[1.0, 0.0]])
    _, metrics = SURROGATES["ppo_clip"].fn(inp)
    assert metrics["surrogate/clip_frac"] == 0.0
    assert metrics["surrogate/ratio_max"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------- reinforce
def test_reinforce_is_minus_advantage_times_logp_with_gradient_minus_advantage():
    inp = inputs([1.0, 2.0], [2.0, -0.5], old=-1.0)
    loss, _ = SURROGATES["reinforce"].fn(inp)
    assert torch.allclose(loss, -inp.advantages * inp.logp.detach())
    assert torch.allclose(grad_of(loss, inp), torch.tensor([[-2.0, 0.5]]))


# ---------------------------------------------------------------------------- gspo (§3.4)
def test_gspo_sequence_ratio_matches_spec_vector():
    # token log-ratios [0.1, -0.3] -> s = exp(mean) = exp(-0.1) = 0.904837
    ratio = [math.exp(0.1), math.exp(-0.3)]
    pos = inputs(ratio, [1.0])
    loss, metrics = SURROGATES["gspo"].fn(pos)
    assert torch.allclose(loss, torch.full((1, 2), -0.904837), atol=1e-6)  # unclipped: -s
    assert metrics["surrogate/ratio_mean"] == pytest.approx(0.904837, abs=1e-6)
    neg = inputs(ratio, [-1.0])
    loss, metrics = SURROGATES["gspo"].fn(neg)
    assert torch.allclose(loss, torch.full((1, 2), 0.9997), atol=1e-6)  # max(0.904837, 1 - 3e-4)
    assert torch.all(grad_of(loss, neg) == 0)  # clipped: zero gradient
    assert metrics["surrogate/clip_frac_low"] == 1.0


def test_gspo_gradient_is_sequence_ratio_times_mean_token_gradient():
    # loss_i = -s_i A_i (unclipped); d s_i / d logp_it = s_i / L_i -> d loss / d logp_it = -A s / L
    ratio = [[math.exp(0.1), math.exp(-0.3), 1.0]]
    inp = inputs(ratio, [2.0], mask=[[1.0, 1.0, 0.0]])
    loss, _ = SURROGATES["gspo"].fn(inp, eps_low=1.0, eps_high=1.0)
    totals = batch_totals(inp.mask, 3)
    agg, _ = AGGREGATIONS["seq-mean-token-mean"].fn(loss, inp.mask, totals)
    (g,) = torch.autograd.grad(agg, inp.logp)
    s = math.exp(-0.1)
    assert torch.allclose(g, torch.tensor([[-2 * s / 2, -2 * s / 2, 0.0]]), atol=1e-6)


def test_gspo_token_equals_gspo_for_sequence_advantages():
    torch.manual_seed(0)
    ratio = torch.exp(0.05 * torch.randn(3, 4))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.float32)
    totals = batch_totals(mask, 4)
    def agg(*args):
        return AGGREGATIONS["seq-mean-token-mean"].fn(*args)[0]
    out = {}
    for name in ("gspo", "gspo_token"):
        inp = inputs(ratio, torch.tensor([[1.0], [-0.5], [0.3]]).expand(3, 4), mask=mask)
        loss, _ = SURROGATES[name].fn(inp, eps_low=0.02, eps_high=0.02)
        value = agg(loss, mask, totals)
        out[name] = (value, torch.autograd.grad(value, inp.logp)[0])
    assert torch.allclose(out["gspo"][0], out["gspo_token"][0], atol=1e-6)
    assert torch.allclose(out["gspo"][1], out["gspo_token"][1], atol=1e-6)


def test_gspo_token_uses_per_token_advantages():
    # value s_i everywhere; gradient s_i * d logp_it scaled by each token's own A
    inp = inputs([1.0, 1.0], [[1.0, -2.0]])
    loss, _ = SURROGATES["gspo_token"].fn(inp, eps_low=0.5, eps_high=0.5)
    assert torch.allclose(loss, torch.tensor([[-1.0, 2.0]]))
    assert torch.allclose(grad_of(loss, inp), torch.tensor([[-1.0, 2.0]]))


@pytest.mark.parametrize("name", ["gspo", "gspo_token", "luspo"])
def test_empty_completion_gets_unit_ratio_and_zero_loss(name):
    inp = inputs([[1.3, 0.7]], [0.0], mask=[[0.0, 0.0]])
    loss, metrics = SURROGATES[name].fn(inp)
    assert torch.all(loss * inp.mask == 0) and torch.isfinite(loss).all()
    assert "surrogate/ratio_mean" not in metrics  # no non-empty sequence to summarise


# ---------------------------------------------------------------------------- cispo (§3.5)
def test_cispo_relative_cap_matches_spec_and_weight_is_stop_gradient():
    # ratio 1.5, A=+1, logp=-2, verl cap 1 + 0.2 -> loss = -1.2 * 1 * (-2) = 2.4; d loss / d logp = -w A = -1.2
    inp = inputs([1.5], [1.0], old=-2.0 - math.log(1.5))
    loss, metrics = SURROGATES["cispo"].fn(inp)
    assert loss.item() == pytest.approx(2.4, rel=1e-6)
    assert grad_of(loss, inp).item() == pytest.approx(-1.2, rel=1e-6)
    assert metrics["surrogate/clip_frac_high"] == 1.0
    assert metrics["surrogate/weight_mean"] == pytest.approx(1.2)


def test_cispo_absolute_cap_is_trl_convention():
    inp = inputs([1.5], [1.0], old=-2.0 - math.log(1.5))
    loss, _ = SURROGATES["cispo"].fn(inp, cap_mode="absolute", eps_high=5.0)  # w = min(1.5, 5) = 1.5
    assert loss.item() == pytest.approx(3.0, rel=1e-6)
    assert grad_of(loss, inp).item() == pytest.approx(-1.5, rel=1e-6)
    with pytest.raises(ValueError, match="eps_low"):
        SURROGATES["cispo"].fn(inp, cap_mode="absolute", eps_low=0.2)


def test_cispo_never_zeroes_a_token_gradient():
    inp = inputs([0.01, 100.0], [-1.0, 1.0])
    loss, _ = SURROGATES["cispo"].fn(inp, eps_low=0.2)
    assert torch.all(grad_of(loss, inp) != 0)


# ---------------------------------------------------------------------------- sapo (§3.6)
SPEC_3_6 = [  # ratio, tau, f, df/dr
    (1.0, 1.0, 2.0, 1.0), (1.0, 1.05, 1.904762, 1.0), (1.2, 1.0, 2.199336, 0.990066),
    (0.8, 1.05, 1.705494, 0.989056), (2.0, 1.0, 2.924234, 0.786448), (3.0, 1.05, 3.393917, 0.388779),
]


def test_sapo_gate_and_its_derivative_match_spec_table():
    # tau 1.0 rows use A=+1 (tau_pos), tau 1.05 rows A=-1 (tau_neg): loss = -f A, so f = -loss * A
    ratio = [r for r, _, _, _ in SPEC_3_6]
    adv = [1.0 if tau == 1.0 else -1.0 for _, tau, _, _ in SPEC_3_6]
    inp = inputs(ratio, adv)
    loss, metrics = SURROGATES["sapo"].fn(inp)
    sign = torch.tensor(adv)
    assert torch.allclose(-loss[0] * sign, torch.tensor([f for *_, f, _ in SPEC_3_6]), atol=1e-5)
    # d loss / d logp = -A f'(r) r  ->  f'(r) = -grad / (A r)
    fprime = -grad_of(loss, inp)[0] / (sign * torch.tensor(ratio))
    assert torch.allclose(fprime, torch.tensor([d for *_, d in SPEC_3_6]), atol=1e-5)
    assert 0 < metrics["surrogate/gate_grad_mean"] <= 1.0


def test_sapo_zero_advantage_uses_tau_neg_and_gives_zero_loss():
    inp = inputs([1.5], [0.0])
    loss, _ = SURROGATES["sapo"].fn(inp)
    assert loss.item() == 0.0 and grad_of(loss, inp).item() == 0.0


# ---------------------------------------------------------------------------- luspo (§3.16)
def _luspo_batch():
    # s = [0.9, 1.1], A = [+1, -1], L = [10, 100]: every token's log-ratio is log s_i
    ratio = torch.tensor([[0.9], [1.1]]).expand(2, 100)
    mask = torch.zeros(2, 100)
    mask[0, :10] = 1
    mask[1, :] = 1
    return ratio, mask


def test_luspo_matches_spec_vector():
    ratio, mask = _luspo_batch()
    totals = batch_totals(mask, 100)
    def agg(*args):
        return AGGREGATIONS["seq-mean-token-mean"].fn(*args)[0]
    params = {"eps_low": 0.5, "eps_high": 0.5}  # keep both sequences unclipped as in the spec
    gspo_loss, _ = SURROGATES["gspo"].fn(inputs(ratio, [[1.0], [-1.0]], mask=mask), **params)
    luspo_loss, _ = SURROGATES["luspo"].fn(inputs(ratio, [[1.0], [-1.0]], mask=mask), **params)
    assert agg(gspo_loss, mask, totals).item() == pytest.approx(0.1, abs=1e-5)  # (-0.9 + 1.1) / 2
    assert agg(luspo_loss, mask, totals).item() == pytest.approx(50.5, abs=1e-3)  # (-0.9*10 + 1.1*100) / 2


def test_luspo_equals_gspo_with_seq_mean_token_sum():
    ratio, mask = _luspo_batch()
    totals = batch_totals(mask, 100)
    results = []
    for surrogate, aggregation in (("luspo", "seq-mean-token-mean"), ("gspo", "seq-mean-token-sum")):
        inp = inputs(ratio, [[1.0], [-1.0]], mask=mask)
        loss, _ = SURROGATES[surrogate].fn(inp, eps_low=0.5, eps_high=0.5)
        value, _ = AGGREGATIONS[aggregation].fn(loss, mask, totals)
        results.append((value, torch.autograd.grad(value, inp.logp)[0]))
    assert torch.allclose(results[0][0], results[1][0], rtol=1e-6)
    assert torch.allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------- dhpo (§3.17, unverified)
def test_dhpo_average_mixing_is_half_ppo_plus_half_gspo_token():
    ratio = [[1.5, 0.7, 1.02]]
    inp = inputs(ratio, [[1.0, -1.0, 0.5]])
    loss, _ = SURROGATES["dhpo"].fn(inp)
    tok, _ = SURROGATES["ppo_clip"].fn(inputs(ratio, [[1.0, -1.0, 0.5]]), eps_high=0.28)
    seq, _ = SURROGATES["gspo_token"].fn(inputs(ratio, [[1.0, -1.0, 0.5]]))
    assert torch.allclose(loss, 0.5 * tok + 0.5 * seq, atol=1e-6)


def test_dhpo_entropy_mixing_weights_high_entropy_tokens_toward_token_ratio():
    # H = [1, 3] -> Hbar = 2 -> w = [sigmoid(-1), sigmoid(1)] = [0.268941, 0.731059]
    entropy = torch.tensor([[1.0, 3.0]])
    inp = inputs([1.0, 1.0], [1.0], entropy=entropy)
    _, metrics = SURROGATES["dhpo"].fn(inp, mixing="entropy")
    assert metrics["surrogate/token_weight_mean"] == pytest.approx(0.5, abs=1e-6)
    # r = 1.5 everywhere: the token branch is clipped (1.5 > 1.28, zero gradient); with eps_seq_high=1
    # the sequence branch (s = 1.5) is not, its gradient is -A s -> total gradient -(1 - w) * 1.5
    inp = inputs([1.5, 1.5], [1.0], entropy=entropy)
    loss, _ = SURROGATES["dhpo"].fn(inp, mixing="entropy", eps_seq_high=1.0)
    w = torch.sigmoid(torch.tensor([-1.0, 1.0]))
    assert torch.allclose(grad_of(loss, inp)[0], -(1 - w) * 1.5, atol=1e-6)


def test_dhpo_entropy_mixing_without_entropy_names_the_field():
    with pytest.raises(ValueError, match="LossInputs.entropy"):
        SURROGATES["dhpo"].fn(inputs([1.0], [1.0]), mixing="entropy")


# ---------------------------------------------------------------------------- all surrogates
REGRESSION = {"reg_grpo_provisional", "rover"}  # they pull the log-ratio to a target: A = 0 still moves r != 1
GROUP_LOSSES = {"disco", "trpa"}  # their loss comes from the rewards / preference levels: they read no advantage


def complete(inp: LossInputs, name: str) -> LossInputs:
    """`inp` with what the learner adds for the surrogate's `requires` (one group, stats of pi_theta = pi_old)."""
    needs = SURROGATES[name].requires
    n, t = inp.mask.shape
    if "group" in needs or "row" in needs:
        inp.group = torch.zeros(n, dtype=torch.long)
        inp.row = {"reward": torch.zeros(n), "group_mean": torch.zeros(n), "group_std": torch.full((n,), 0.5),
                   "col:level": torch.arange(1.0, n + 1)}  # fmt: skip
    if "ref_logprobs" in needs:
        inp.ref_logp = torch.full((n, t), -1.0)
    for need in needs:
        if need.startswith("stat:") and need != "stat:entropy":
            inp.stats[need[5:]] = -torch.full((n, t), 3.0)
            inp.old_stats[need[5:]] = -torch.full((n, t), 3.0)
    return inp


@pytest.mark.parametrize("name", sorted(set(SURROGATES) - GROUP_LOSSES))
def test_zero_advantage_gives_zero_loss_and_gradient(name):
    ratio = [[1.0, 1.0, 1.0]] if name in REGRESSION else [[0.5, 1.0, 2.0]]
    inp = complete(inputs(ratio, [0.0], entropy=torch.ones(1, 3)), name)
    loss, _ = SURROGATES[name].fn(inp)
    assert torch.all(loss == 0)
    assert torch.all(grad_of(loss, inp) == 0)


@pytest.mark.parametrize("name", sorted(REGRESSION))
def test_regression_surrogates_pull_the_log_ratio_back_when_the_advantage_is_zero(name):
    inp = complete(inputs([[0.5, 1.0, 2.0], [1.0, 1.5, 1.0]], [0.0]), name)
    inp.group = torch.tensor([0, 0])
    loss, _ = SURROGATES[name].fn(inp)
    assert float(loss.detach().sum()) > 0 and bool(grad_of(loss, inp).abs().sum() > 0)


@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_fully_masked_row_adds_nothing_to_the_aggregated_loss(name):
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    totals = BatchTotals(num_tokens=2.0, num_seqs=1.0, max_new_tokens=2)
    inp = complete(inputs([[1.1, 0.9], [3.0, 0.2]], [[1.0], [5.0]], mask=mask, entropy=torch.ones(2, 2)), name)
    loss, _ = SURROGATES[name].fn(inp)
    value, _ = AGGREGATIONS["token-mean"].fn(loss, mask, totals)
    (g,) = torch.autograd.grad(value, inp.logp)
    assert torch.isfinite(value) and torch.all(g[1] == 0)


def test_shape_mismatch_names_the_field():
    inp = inputs([1.0, 1.0], [1.0])
    inp.advantages = torch.ones(2)
    with pytest.raises(ValueError, match="advantages"):
        SURROGATES["ppo_clip"].fn(inp)
