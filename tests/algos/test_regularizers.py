"""Regularizers: the spec's vectors, micro-batch
invariance through the pre-pass, state, and EPO's smoothing against a per-turn history."""

import math

import pytest
import torch

from covey.algos import REGULARIZERS, SURROGATES, BatchTotals, LossInputs
from covey.algos.presets import resolve_algo
from covey.algos.regularizers import RegularizerSet
from covey.algos.regularizers.base import detached


def inputs(logp, old, adv, mask=None, entropy=None, turn=None):
    logp = torch.tensor(logp, dtype=torch.float64).requires_grad_(True)
    old = torch.tensor(old, dtype=torch.float64)
    adv = torch.tensor(adv, dtype=torch.float64)
    adv = adv[:, None].expand_as(old).clone() if adv.dim() == 1 else adv
    mask = torch.ones_like(old) if mask is None else torch.tensor(mask, dtype=torch.float64)
    ent = None if entropy is None else torch.tensor(entropy, dtype=torch.float64).requires_grad_(True)
    return LossInputs(logp, old, adv, mask, ent, turn=None if turn is None else torch.tensor(turn))


def totals_of(mask) -> BatchTotals:
    return BatchTotals(float(mask.sum()), float((mask.sum(-1) > 0).sum()), mask.shape[1])


def run(reg, inp, totals=None):
    """begin + observe (the pre-pass) + call, as the learner does for one micro-batch."""
    totals = totals or totals_of(inp.mask)
    reg.begin()
    if reg.prepass:
        reg.observe(detached(inp), totals)
    return reg(inp, totals)


def micro_batched(name, params, inp, rows):
    """Value and gradient of a regularizer over micro-batches `rows` (lists of row indices) with the pre-pass."""
    reg = REGULARIZERS.build(name, params)
    totals = totals_of(inp.mask)
    parts = []
    for idx in rows:
        logp = inp.logp.detach()[idx].clone().requires_grad_(True)
        parts.append((logp, LossInputs(logp, inp.old_logp[idx], inp.advantages[idx], inp.mask[idx])))
    reg.begin()
    if reg.prepass:
        for _, p in parts:
            reg.observe(detached(p), totals)
    grad = torch.zeros_like(inp.logp)
    value = 0.0
    for idx, (logp, p) in zip(rows, parts):
        v, _ = reg(p, totals)
        (g,) = torch.autograd.grad(v, logp)
        grad[idx] = g
        value += float(v)
    return value, grad


# ---------------------------------------------------------------------------- llds (§2.6)
LLDS_VECTOR = dict(logp=[[-1.0, -0.7, -2.5], [-0.3, -1.2, -0.9]], old=[[-0.9, -0.8, -2.0], [-0.2, -1.0, -1.0]], adv=[1.0, -1.0])


def test_llds_spec_vector_value_and_gradient():
    inp = inputs(**LLDS_VECTOR)
    reg = REGULARIZERS.build("llds", {"coef": 1.0})
    value, metrics = run(reg, inp)
    assert float(value) == pytest.approx(0.3, abs=1e-9)  # (0.1 + 0.5) / 2 gated tokens
    (g,) = torch.autograd.grad(value, inp.logp)
    assert torch.allclose(g, torch.tensor([[-0.5, 0, -0.5], [0, 0, 0]], dtype=torch.float64))
    assert metrics["gated_frac"] == pytest.approx(2 / 6)
    default, _ = run(REGULARIZERS.build("llds", {}), inputs(**LLDS_VECTOR))
    assert float(default) == pytest.approx(0.015, abs=1e-9)  # coef 0.05


def test_llds_gates_and_normalisers():
    # adv_gate "all": row 1 (A < 0) is gated too: traj 1, tok [1, 1, 0] -> (0.1 + 0.5 + 0.1 + 0.2) / 4
    v, _ = run(REGULARIZERS.build("llds", {"coef": 1.0, "adv_gate": "all"}), inputs(**LLDS_VECTOR))
    assert float(v) == pytest.approx(0.9 / 4, abs=1e-9)
    # norm "tokens": over all 6 tokens of the mini-batch
    v, _ = run(REGULARIZERS.build("llds", {"coef": 1.0, "norm": "tokens"}), inputs(**LLDS_VECTOR))
    assert float(v) == pytest.approx(0.6 / 6, abs=1e-9)
    # likelihood went up on average: the trajectory gate is closed, no penalty
    v, m = run(REGULARIZERS.build("llds", {"coef": 1.0}), inputs([[-0.5, -0.9]], [[-0.9, -0.8]], [1.0]))
    assert float(v) == 0.0 and m["gated_frac"] == 0.0
    # on-policy: logp = old, nothing gated
    v, _ = run(REGULARIZERS.build("llds", {}), inputs([[-1.0, -2.0]], [[-1.0, -2.0]], [1.0]))
    assert float(v) == 0.0


@pytest.mark.parametrize("norm", ["gated", "tokens"])
def test_llds_is_micro_batch_invariant(norm):
    inp = inputs(**LLDS_VECTOR)
    whole = micro_batched("llds", {"coef": 1.0, "norm": norm}, inp, [[0, 1]])
    split = micro_batched("llds", {"coef": 1.0, "norm": norm}, inp, [[0], [1]])
    assert whole[0] == pytest.approx(split[0]) and torch.allclose(whole[1], split[1])


# ---------------------------------------------------------------------------- disco_kl (§2.22)
def test_disco_kl_spec_vector():
    # kl = masked mean(old - logp) = 0.02 -> coef = 1e3 (0.02 - 1e-4) = 19.9, penalty 0.398
    inp = inputs([[-1.01, -1.03]], [[-0.99, -1.01]], [1.0])
    reg = REGULARIZERS.build("disco_kl", {})
    value, m = run(reg, inp)
    assert m["kl"] == pytest.approx(0.02, abs=1e-12) and m["coef"] == pytest.approx(19.9, abs=1e-9)
    assert float(value) == pytest.approx(0.398, abs=1e-9) and m["penalty"] == pytest.approx(0.398, abs=1e-9)
    (g,) = torch.autograd.grad(value, inp.logp)  # sg(coef) * d kl / d logp = 19.9 * (-1/2)
    assert torch.allclose(g, torch.full_like(g, -19.9 / 2))
    small, m = run(reg, inputs([[-1.0001, -1.0]], [[-1.0, -1.0]], [1.0]))  # kl = 5e-5 < delta
    assert float(small) == 0.0 and m["coef"] == 0.0


def test_disco_kl_prepass_off_uses_the_previous_mini_batch():
    reg = REGULARIZERS.build("disco_kl", {"prepass": False})
    assert not reg.prepass
    v1, m1 = run(reg, inputs([[-1.01, -1.03]], [[-0.99, -1.01]], [1.0]))
    assert m1["kl"] == 0.0 and float(v1) == 0.0  # nothing seen yet
    reg.after_step()
    v2, m2 = run(reg, inputs([[-1.0, -1.0]], [[-1.0, -1.0]], [1.0]))
    assert m2["kl"] == pytest.approx(0.02) and m2["coef"] == pytest.approx(19.9)
    assert reg.state_dict() == {"last_kl": pytest.approx(0.02)}
    other = REGULARIZERS.build("disco_kl", {"prepass": False})
    other.load_state_dict(reg.state_dict())
    assert other.state_dict() == reg.state_dict()


def test_disco_kl_is_micro_batch_invariant():
    inp = inputs([[-1.2, -1.0, -0.5], [-2.0, -0.1, -0.3]], [[-1.0, -1.1, -0.4], [-1.5, -0.2, -0.3]], [1.0, -1.0])
    for kl_type in ("kl", "low_var_kl"):
        whole = micro_batched("disco_kl", {"kl_type": kl_type}, inp, [[0, 1]])
        split = micro_batched("disco_kl", {"kl_type": kl_type}, inp, [[0], [1]])
        assert whole[0] > 0 and whole[0] == pytest.approx(split[0]) and torch.allclose(whole[1], split[1])


# ---------------------------------------------------------------------------- kl_old (TRPA, §2.19)
def test_kl_old_is_coef_times_token_mean_low_var_kl():
    inp = inputs([[-1.0, -0.5]], [[-1.5, -0.5]], [1.0])
    value, m = run(REGULARIZERS.build("kl_old", {"coef": 0.5}), inp)
    d = -1.0 - (-1.5)  # verl low_var_kl(logp, ref=old): x = old - logp; e^x - x - 1
    want = 0.5 * (math.exp(-d) + d - 1) / 2
    assert float(value) == pytest.approx(want, abs=1e-7) and m["kl"] == pytest.approx(want / 0.5, abs=1e-7)
    with pytest.raises(ValueError, match="unknown KL estimator"):
        REGULARIZERS.build("kl_old", {"estimator": "k9"})


# ---------------------------------------------------------------------------- r2vpo (§2.5)
def test_r2vpo_spec_vector_surrogate_plus_regularizer():
    ratios = torch.tensor([[1.1, 0.9, 1.3]], dtype=torch.float64)
    r = ratios.clone().requires_grad_(True)
    inp = LossInputs(r.log(), torch.zeros_like(r), torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64), torch.ones_like(r))
    sur, _ = SURROGATES["r2vpo_provisional"].fn(inp)
    reg = REGULARIZERS.build("r2vpo_provisional", {"lambda0": 0.5})
    value, _ = run(reg, inp)
    loss = sur.sum() / 3 + value  # token-mean aggregation + the scalar term
    assert float(loss) == pytest.approx(-0.4867, abs=1e-4)
    (g,) = torch.autograd.grad(loss, r)
    assert torch.allclose(g, torch.tensor([[-0.3333, 0.2667, -0.2667]], dtype=torch.float64), atol=1e-4)
    out = reg.after_step()
    assert out["ratio_var"] == pytest.approx(0.0267, abs=1e-4)
    assert reg.lam == pytest.approx(0.5167, abs=1e-4) and out["lambda_next"] == reg.lam
    assert reg.state_dict() == {"lambda": reg.lam}
    fresh = REGULARIZERS.build("r2vpo_provisional", {})
    fresh.load_state_dict(reg.state_dict())
    assert fresh.lam == reg.lam


def test_r2vpo_dual_variable_stays_non_negative_and_is_micro_batch_invariant():
    reg = REGULARIZERS.build("r2vpo_provisional", {"lambda0": 0.001, "delta": 0.5})
    run(reg, inputs([[-1.0, -1.0]], [[-1.0, -1.0]], [1.0]))  # on-policy: Var = 0 < delta
    reg.after_step()
    assert reg.lam == 0.0
    inp = inputs([[-1.2, -1.0, -0.5], [-2.0, -0.1, -0.3]], [[-1.0, -1.1, -0.4], [-1.5, -0.2, -0.3]], [1.0, -1.0])
    whole = micro_batched("r2vpo_provisional", {"lambda0": 1.0}, inp, [[0, 1]])
    split = micro_batched("r2vpo_provisional", {"lambda0": 1.0}, inp, [[0], [1]])
    assert whole[0] > 0 and whole[0] == pytest.approx(split[0]) and torch.allclose(whole[1], split[1])


# ---------------------------------------------------------------------------- epo
def test_epo_defaults_are_the_released_script_s_plain_entropy_bonus():
    # WujiangXu/EPO ships entropy_smooth=False: the history is kept but never penalises
    reg = REGULARIZERS.build("epo", {"coef": 0.1})
    assert not reg.smooth and reg.penalty == "released"
    reg.load_state_dict({"hist_sum": {0: 2.0}, "hist_cnt": {0: 1}})
    inp = inputs([[-1.0] * 3], [[-1.0] * 3], [1.0], entropy=[[0.5, 2.0, 3.5]])
    value, m = reg(inp, totals_of(inp.mask))
    assert torch.allclose(value, -0.1 * torch.tensor([[0.5, 2.0, 3.5]], dtype=torch.float64)) and m["penalty"] == 0.0
    # smoothing on, the released penalty: a constant (0.1 out of band), no gradient
    on = REGULARIZERS.build("epo", {"coef": 0.1, "smooth": True})
    on.load_state_dict(reg.state_dict())
    value, m = on(inp, totals_of(inp.mask))
    assert torch.allclose(value, -0.1 * (torch.tensor([[0.5, 2.0, 3.5]], dtype=torch.float64) - torch.tensor([0.1, 0.0, 0.1])))
    (g,) = torch.autograd.grad(value.sum(), inp.entropy)
    assert torch.allclose(g, torch.full_like(g, -0.1))


def test_epo_entropy_bonus_and_history():
    reg = REGULARIZERS.build("epo", {"coef": 0.1, "smooth": True, "penalty": "deviation"})
    inp = inputs([[-1.0, -1.0]], [[-1.0, -1.0]], [1.0], entropy=[[1.0, 3.0]])
    value, m = reg(inp, totals_of(inp.mask))
    assert torch.allclose(value, torch.tensor([[-0.1, -0.3]], dtype=torch.float64))  # no history yet: the plain bonus
    assert m["out_of_band_frac"] == 0.0 and m["entropy"] == pytest.approx(2.0)
    assert reg.after_update() == {"history_turns": 1.0} and reg.state_dict() == {"hist_sum": {0: 2.0}, "hist_cnt": {0: 1}}
    # history 2.0, band (1.0, 3.0): H = 0.5 and 3.5 are out, 2.0 in
    inp = inputs([[-1.0] * 3], [[-1.0] * 3], [1.0], entropy=[[0.5, 2.0, 3.5]])
    value, m = reg(inp, totals_of(inp.mask))
    pen = torch.tensor([0.1 * 1.5, 0.0, 0.1 * 1.5], dtype=torch.float64)  # out_range_penalty * |H - Hbar|
    assert torch.allclose(value, -0.1 * (torch.tensor([[0.5, 2.0, 3.5]], dtype=torch.float64) - pen))
    assert m["out_of_band_frac"] == pytest.approx(2 / 3)
    (g,) = torch.autograd.grad(value.sum(), inp.entropy)  # -coef (1 - p sign(H - Hbar)) where out of band
    assert torch.allclose(g, torch.tensor([[-0.1 * 1.1, -0.1, -0.1 * 0.9]], dtype=torch.float64))


def test_epo_released_penalty_has_no_gradient_and_turns_have_their_own_history():
    reg = REGULARIZERS.build("epo", {"coef": 0.1, "smooth": True, "penalty": "released"})
    reg.load_state_dict({"hist_sum": {0: 2.0, 1: 10.0}, "hist_cnt": {0: 1, 1: 2}})  # Hbar: turn 0 -> 2.0, turn 1 -> 5.0
    inp = inputs([[-1.0] * 3], [[-1.0] * 3], [1.0], entropy=[[0.5, 2.0, 4.0]], turn=[[0, 0, 1]])
    value, m = reg(inp, totals_of(inp.mask))
    assert torch.allclose(value, -0.1 * (torch.tensor([[0.5, 2.0, 4.0]], dtype=torch.float64) - torch.tensor([0.1, 0.0, 0.0])))
    (g,) = torch.autograd.grad(value.sum(), inp.entropy)
    assert torch.allclose(g, torch.full_like(g, -0.1))  # the released mask is a constant
    seq = REGULARIZERS.build("epo", {"coef": 0.1, "smooth": True, "level": "seq", "from_turn": 1})
    seq.load_state_dict(reg.state_dict())
    v, m = seq(inp, totals_of(inp.mask))
    assert m["out_of_band_frac"] == pytest.approx(1 / 3)  # only the turn-1 token is eligible; row mean 6.5/3 < 2.5
    with pytest.raises(ValueError, match="min_ratio"):
        REGULARIZERS.build("epo", {"min_ratio": 2.0, "max_ratio": 1.0})


# ---------------------------------------------------------------------------- the set and the config
def test_regularizer_set_sums_terms_prefixes_metrics_and_round_trips_state():
    cfg = resolve_algo({"regularizers": [{"name": "llds", "coef": 1.0}, {"name": "epo", "coef": 0.1}, "r2vpo_provisional"]})
    regs = RegularizerSet(cfg.regularizers)
    assert regs.prepass and regs.requires == {"stat:entropy"}
    inp = inputs(**LLDS_VECTOR, entropy=[[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    regs.begin()
    regs.observe(detached(inp), totals_of(inp.mask))
    tok, scalar, metrics = regs(inp, totals_of(inp.mask))
    assert tok.shape == (2, 3) and scalar.dim() == 0
    assert {"reg/llds/gated_frac", "reg/epo/entropy", "reg/r2vpo_provisional/loss"} <= set(metrics)
    assert float(scalar) == pytest.approx(0.3 + 0.0)  # r2vpo's lambda0 = 0
    regs.after_step()
    regs.after_update()
    state = regs.state_dict()
    assert set(state) == {"0:llds", "1:epo", "2:r2vpo_provisional"}
    again = RegularizerSet(cfg.regularizers)
    again.load_state_dict(state)
    assert again.state_dict() == state


@pytest.mark.parametrize(
    "regs, message",
    [
        ([{"name": "llds"}, {"name": "llds"}], "listed twice"),
        ([{"name": "llds", "cof": 1.0}], "no parameter"),
        ([{"name": "nope"}], "unknown regularizer"),
        ([{"name": "disco_kl", "beta": -1.0}], "beta"),
        ([{"name": "kl_old", "estimator": "k9"}], "unknown KL estimator"),
    ],
)
def test_bad_regularizer_configs_are_refused_with_the_index(regs, message):
    with pytest.raises(ValueError, match=message) as e:
        resolve_algo({"regularizers": regs})
    assert "algo.regularizers[" in str(e.value)
