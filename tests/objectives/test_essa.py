"""essa_provisional (ESSA, arXiv 2507.04453, reconstructed): CMA-ES by hand and on a quadratic, the SVD-LoRA
parameterisation, the update from the population's fitness, and the configs it refuses."""

import math

import pytest
import torch

from covey.objectives.cmaes import CMAES, cma_constants
from covey.objectives.essa import SVDLoRA
from covey.train.config import ConfigError, load_config


def test_default_constants_for_two_dimensions():
    # lambda = 4 + floor(3 ln 2) = 6, mu = 3, w ~ ln 3.5 - ln i normalised; numbers computed by hand from the tutorial
    k = cma_constants(2)
    assert (k["lam"], k["mu"]) == (6, 3)
    assert k["weights"].tolist() == pytest.approx([0.63704257, 0.28457026, 0.07838717])
    assert k["mu_eff"] == pytest.approx(2.02861146)
    assert (k["c_sigma"], k["d_sigma"], k["c_c"]) == pytest.approx((0.44620499, 1.44620499, 0.62455454))
    assert (k["c_1"], k["c_mu"]) == pytest.approx((0.15481540, 0.05785909))
    assert k["chi_n"] == pytest.approx(math.sqrt(2) * (1 - 1 / 8 + 1 / 84))


def test_mean_moves_to_the_weighted_best_candidates():
    # n 1: lambda 4, mu 2, w = [ln 2.5, ln 1.25] / ln 3.125 = [0.80420, 0.19580]; candidates 1..4 around m 0, sigma 1,
    # fitness = x: the best two are 4 and 3 -> m = 0.80420 x 4 + 0.19580 x 3 = 3.80420
    es = CMAES(torch.zeros(1), 1.0)
    es.tell(torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    w0 = math.log(2.5) / math.log(3.125)
    assert float(es.mean) == pytest.approx(w0 * 4 + (1 - w0) * 3)
    assert es.generation == 1 and es.sigma > 1.0  # a long step lengthens sigma


def test_cma_es_finds_the_top_of_a_quadratic():
    target = torch.tensor([0.3, -1.2, 2.0, 0.5], dtype=torch.float64)
    es = CMAES(torch.zeros(4), 0.5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(150):
        x = es.ask(gen)
        es.tell(x, -((x - target) ** 2).sum(-1))
    assert float((es.mean - target).norm()) < 1e-3


def test_state_round_trip_continues_identically():
    a = CMAES(torch.zeros(3), 0.3)
    gen = torch.Generator().manual_seed(1)
    x = a.ask(gen)
    a.tell(x, -(x**2).sum(-1))
    b = CMAES(torch.zeros(3), 0.3)
    b.load_state_dict(a.state_dict())
    ga, gb = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    assert torch.equal(a.ask(ga), b.ask(gb))
    with pytest.raises(ValueError, match="NaN"):
        a.tell(a.ask(ga), torch.full((a.population,), float("nan")))


def _peft(seed=0, warm=True):
    from peft import LoraConfig, get_peft_model

    from covey.models import load

    model, _ = load("tiny-llama", seed=seed)
    model = get_peft_model(model.float(), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    if warm:
        g = torch.Generator().manual_seed(seed)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.data = torch.randn(p.shape, generator=g) * 0.1
    return model


def _deltas(model):
    from peft.tuners.lora import LoraLayer

    return [m.get_delta_weight("default").clone() for _, m in model.named_modules() if isinstance(m, LoraLayer)]


def test_svd_parameterisation_keeps_the_adapter_and_moves_only_singular_values():
    model = _peft()
    before = _deltas(model)
    svd = SVDLoRA(model)
    assert svd.theta0.numel() == 2 * len(before) and bool((svd.theta0 >= 0).all())  # r = 2 singular values a module
    svd.set(svd.theta0)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(before, _deltas(model)))
    svd.set(svd.theta0 * 2)  # doubling every singular value doubles every adapter's update
    assert all(torch.allclose(2 * a, b, atol=1e-5) for a, b in zip(before, _deltas(model)))


def test_a_cold_adapter_starts_from_random_directions_at_zero():
    model = _peft(warm=False)
    svd = SVDLoRA(model, seed=3)
    assert bool((svd.theta0 == 0).all())
    svd.set(svd.theta0)
    assert all(float(d.detach().abs().max()) == 0 for d in _deltas(model))
    svd.set(torch.ones_like(svd.theta0))
    assert all(float(d.detach().abs().max()) > 0 for d in _deltas(model))


BASE = ["model.name=tiny-llama", "task.name=arithmetic", "reward_workers=0", "log.tensorboard=false"]


def test_refuses_essa_without_lora_or_population_rollouts():
    with pytest.raises(ConfigError, match="searches the singular values of LoRA adapters: set model.lora"):
        load_config(None, [*BASE, "algo.objective={name: essa_provisional}", "rollout.strategy={name: es_population}"])
    with pytest.raises(ConfigError, match="set rollout.strategy: es_population"):
        load_config(None, [*BASE, "model.lora={r: 2}", "algo.objective={name: essa_provisional}"])
    with pytest.raises(ConfigError, match="runtime.executor inline"):
        load_config(None, [*BASE, "model.lora={r: 2}", "algo.objective={name: essa_provisional}",
                           "rollout.strategy={name: es_population}", "runtime.executor=thread"])


def test_the_update_follows_the_fittest_candidates_and_no_gradient_is_taken():
    from types import SimpleNamespace

    from covey.objectives.essa import ESSA
    from covey.rollouts import Rollouts

    model = _peft()
    obj = ESSA(SimpleNamespace(seed=0), model, "cpu", sigma0=0.05, population=4)
    cands = obj.candidates()
    assert torch.equal(cands, obj.candidates())  # one draw per generation
    n = 8  # two rows per candidate; candidate 2 alone is rewarded
    rows = Rollouts(prompt_ids=[torch.tensor([1])] * n, completion_ids=torch.ones(n, 1, dtype=torch.long),
                    completion_mask=torch.ones(n, 1), behaviour_logprobs=torch.zeros(n, 1), group=torch.arange(n) // 2,
                    prompt_id=torch.zeros(n, dtype=torch.long), rewards=torch.tensor([0.0] * 4 + [1.0] * 2 + [0.0] * 2)[:, None],
                    reward_names=("accuracy",), reward_weights=torch.ones(1), candidate=torch.arange(n) // 2)  # fmt: skip
    start = obj.es.mean.clone()
    out, extra, m = obj.prepare(None, rows, None)
    assert out is None and m["essa/fitness_best"] == 1.0 and m["essa/fitness_mean"] == 0.25
    # the best candidate has the largest recombination weight: the mean moves towards it more than to any other
    step = obj.es.mean - start
    toward = [(step @ (c - start)).item() for c in cands]
    assert max(range(4), key=lambda i: toward[i]) == 2
    assert obj.candidates().shape == cands.shape and not torch.equal(obj.candidates(), cands)  # a new generation
