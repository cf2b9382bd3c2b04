"""Likelihood estimators against the spec's toy model and vectors (rewards-eval-diffusion.md §4.3):
every masked token's log-prob is -a - b m / L when m of the L tokens are masked; exact ELBO
-a L - b (L + 1) / 2 (a = 1, b = 2: -9 at L = 4, -513 at L = 256)."""

import pytest
import torch

from covey.likelihood import LIKELIHOODS, Canvas, mc_samples, model_canvas, row_seeds
from covey.likelihood.estimators import gauss_legendre
from covey.models import load

A, B = 1.0, 2.0


def toy(n: int, length: int, sample=None, seed0: int = 0, log=None) -> Canvas:
    def score(mask, prompt_mask=None):
        if log is not None:
            log.append(mask.clone())
        m = mask.sum(-1, keepdim=True).float()
        return (-A - B * m / length).expand(n, length).clone()

    return Canvas(score=score, n=n, length=length, seeds=list(range(seed0, seed0 + n)), prompt_lengths=[3] * n, sample=sample)


def seq(name, canvas, **params):
    """Per-row sequence estimate (ELBO_i = L * the broadcast value)."""
    out = LIKELIHOODS.get(name).bind(params)(canvas).token_logp
    assert torch.allclose(out, out[:, :1].expand_as(out))  # one value per row, on every token
    return out[:, 0] * canvas.length


def exact(length):
    return -A * length - B * (length + 1) / 2


def test_gauss_legendre_nodes():
    t, w = gauss_legendre(2)
    assert t == pytest.approx([0.211325, 0.788675], abs=1e-6) and w == pytest.approx([0.5, 0.5])
    t, w = gauss_legendre(3)
    assert t == pytest.approx([0.112702, 0.5, 0.887298], abs=1e-6) and w == pytest.approx([0.277778, 0.444444, 0.277778], abs=1e-6)


def test_d1_one_step_is_the_mean_field_value():
    log = []
    lp = LIKELIHOODS.get("d1_one_step").bind({"p_mask_prompt": 0.0})(toy(2, 4, log=log)).token_logp
    assert lp.sum(-1).tolist() == [-12.0, -12.0]  # L (-a - b) = -12, biased against the ELBO -9
    assert log[0].all()


def test_d1_prompt_masking_rate():
    masks = []
    c = toy(400, 4)
    c.score = lambda mask, pm: masks.append(pm) or torch.zeros(400, 4)
    LIKELIHOODS.get("d1_one_step").bind({"p_mask_prompt": 0.3})(c)
    frac = torch.stack(masks[0]).float().mean()
    assert 0.26 < float(frac) < 0.34


def test_elbo_mc_vectors():
    est = seq("elbo_mc", toy(8000, 4), mc_num=1)
    assert set(est.tolist()) <= {-6.0, -8.0, -10.0, -12.0}  # -a L - b k for k = 1..4
    assert float(est.mean()) == pytest.approx(-9, abs=0.1) and float(est.var()) == pytest.approx(5.0, rel=0.06)
    # stratified over L copies: every count once, variance 0 (the exact ELBO every time)
    assert torch.allclose(seq("elbo_mc", toy(50, 4), mc_num=4), torch.full((50,), -9.0))
    est = seq("elbo_mc", toy(6000, 64), mc_num=1)
    assert float(est.var()) == pytest.approx(1365.0, rel=0.06) and float(est.mean()) == pytest.approx(-129, abs=1.5)
    # unstratified counts: same mean, no variance reduction from 4 samples beyond 1/4
    est = seq("elbo_mc", toy(6000, 4), mc_num=4, stratified=False)
    assert float(est.var()) == pytest.approx(5.0 / 4, rel=0.1)


def test_elbo_antithetic_vectors():
    est = seq("elbo_antithetic", toy(8000, 4), num_mc=1)
    assert set(est.tolist()) <= {-7.5, -10.0}  # values by k = 0..4: [-7.5, -10, -10, -10, -7.5]
    assert float(est.mean()) == pytest.approx(-9, abs=0.06) and float(est.var()) == pytest.approx(1.5, rel=0.06)


@pytest.mark.parametrize("nodes,var4", [(1, 37.5), (2, 22.0), (3, 16.667)])
def test_elbo_sdmc_vectors_l4(nodes, var4):
    est = seq("elbo_sdmc", toy(12000, 4), nodes=nodes, masks_per_node=1)
    assert float(est.mean()) == pytest.approx(-9, abs=0.15)  # exact in expectation: g(t) is linear
    assert float(est.var()) == pytest.approx(var4, rel=0.06)


def test_variance_ordering_at_l256():
    """GDPO's claim: at realistic lengths the deterministic nodes cut the variance ~10x at equal cost."""
    n = 3000
    mc = seq("elbo_mc", toy(n, 256), mc_num=1)
    sd1 = seq("elbo_sdmc", toy(n, 256), nodes=1)
    sd3 = seq("elbo_sdmc", toy(n, 256), nodes=3)
    assert float(mc.var()) == pytest.approx(21845.0, rel=0.08)
    assert float(sd1.var()) == pytest.approx(2305.99, rel=0.08)
    assert float(sd3.var()) == pytest.approx(837.85, rel=0.08)
    assert float(sd3.var()) < float(sd1.var()) < float(mc.var())
    for est in (mc, sd1, sd3):
        assert float(est.mean()) == pytest.approx(exact(256), abs=4 * float(est.std()) / n**0.5)


@pytest.mark.parametrize("name,params", [("elbo_mc", {"mc_num": 3}), ("elbo_antithetic", {"num_mc": 2}),
                                         ("elbo_sdmc", {"nodes": 2, "masks_per_node": 2})])  # fmt: skip
def test_per_sample_terms_average_to_the_estimate(name, params):
    full = seq(name, toy(20, 16), **params)
    m = mc_samples(name, params)
    assert m == {"elbo_mc": 3, "elbo_antithetic": 2, "elbo_sdmc": 4}[name]
    terms = torch.stack([seq(name, toy(20, 16, sample=j), **params) for j in range(m)])
    assert torch.allclose(terms.mean(0), full, atol=1e-4)


def test_masks_depend_only_on_the_row():
    """Common random numbers: a row's masks do not depend on the other rows of its batch."""
    log_a, log_b = [], []
    LIKELIHOODS.get("elbo_sdmc").bind({})(toy(4, 8, log=log_a))
    LIKELIHOODS.get("elbo_sdmc").bind({})(toy(2, 8, seed0=2, log=log_b))
    assert all(torch.equal(a[2:], b) for a, b in zip(log_a, log_b))


def test_row_seeds_and_ratio_one_on_tiny_llada():
    model, _ = load("tiny-llada")
    prompts = [torch.tensor([1, 5, 6]), torch.tensor([1, 5, 6]), torch.tensor([2, 7])]
    comp = torch.tensor([[10, 11, 12, 2], [10, 11, 13, 2], [20, 21, 2, 2]])
    ver = torch.zeros(3, 4, dtype=torch.long)
    seeds = row_seeds(prompts, comp, ver)
    assert len(set(seeds)) == 3 and seeds == row_seeds(prompts, comp, ver)
    assert row_seeds(prompts, comp, ver + 1) != seeds  # a new policy version draws new masks
    for name in ("d1_one_step", "elbo_mc", "elbo_antithetic", "elbo_sdmc"):
        fn = LIKELIHOODS.get(name).bind({})
        with torch.no_grad():
            a = fn(model_canvas(model, None, prompts, comp, seeds)).token_logp
            b = fn(model_canvas(model, None, prompts, comp, seeds)).token_logp
            part = fn(model_canvas(model, None, prompts[2:], comp[2:], seeds[2:])).token_logp
        assert torch.equal(a, b) and torch.allclose(a[2:], part, atol=1e-5) and torch.isfinite(a).all()
        assert (a < 0).all()


def test_elbo_double_mc_unbiased_but_heavier_tailed_than_sdmc():
    est = seq("elbo_double_mc", toy(20000, 4), mc_num=1)
    assert float(est.mean()) == pytest.approx(-9, abs=0.5)
    assert float(est.var()) > 37.5  # above sdmc with one node at the same cost (37.5)
    est = seq("elbo_double_mc", toy(3000, 256), mc_num=1)
    assert float(est.var()) > 2305.99  # the spec: one-node sdmc 2306 at L = 256
