"""ctrls_provisional (CTRLS, arXiv 2507.08182, reconstructed): the REINFORCE loss by hand, the behaviour's
epsilon mixture, a latent input vector changes generation, the LM stays frozen, and the configs refused."""

import math
from types import SimpleNamespace

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.models import load
from covey.objectives.ctrls import CTRLS, ctrls_loss
from covey.train.config import ConfigError, load_config


def test_loss_by_hand():
    # pi(row 0) = [1/2, 1/2], pi(row 1) = [3/4, 1/4]; both transitions belong to episode 0 (A 2), episode 1 (A -1) has none
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    loss, ent = ctrls_loss(logits, torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([2.0, -1.0]), beta=0.1)
    sum_logp = math.log(0.5) + math.log(0.25)
    h = (math.log(2) + -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))) / 2
    assert float(ent) == pytest.approx(h)
    assert float(loss) == pytest.approx(-(2.0 * sum_logp + 0.0) / 2 - 0.1 * h)


def _objective(**kw):
    model, _ = load("tiny-llama", seed=0)
    return CTRLS(SimpleNamespace(seed=0), model.float(), "cpu", **kw), model


def test_behaviour_mixes_uniform_exploration():
    obj, model = _objective(latents=4, epsilon=1.0)
    states = torch.randn(4000, model.config.hidden_size)
    counts = torch.bincount(obj.act(states), minlength=4).double() / 4000
    assert torch.allclose(counts, torch.full((4,), 0.25, dtype=torch.float64), atol=0.03)  # all uniform
    greedy, _ = _objective(latents=4, epsilon=0.0)
    with torch.no_grad():
        greedy.module[2].bias.copy_(torch.tensor([0.0, 20.0, 0.0, 0.0]))  # pi puts its mass on action 1
    assert bool((greedy.act(states[:200]) == 1).all())
    assert greedy.latent_vectors(torch.tensor([1, 2])).shape == (2, model.config.hidden_size)


def test_a_latent_vector_steers_the_frozen_model():
    model, tok = load("tiny-llama", initializer_range=0.2, seed=3)
    engine = TorchEngine(model.float().eval(), tok, dtype="fp32")
    sp = SamplingParams(max_new_tokens=5, seed=4, ignore_eos=True, temperature=0.01)
    plain, _, _ = engine.generate_soft([[5, 6, 7]], 1, sp, None)
    scale = model.get_input_embeddings().weight.norm(dim=-1).mean()
    outs = set()
    for k in range(4):
        v = torch.randn(1, model.config.hidden_size, generator=torch.Generator().manual_seed(k)) * scale * 3
        g, _, _ = engine.generate_soft([[5, 6, 7]], 1, sp, None, lead=v)
        outs.add(tuple(g.completion_ids[0].tolist()))
    assert len(outs | {tuple(plain.completion_ids[0].tolist())}) > 1
    with pytest.raises(ValueError, match="lead must be"):
        engine.generate_soft([[5, 6, 7]], 2, sp, None, lead=torch.zeros(1, model.config.hidden_size))


BASE = ["model.name=tiny-llama", "task.name=arithmetic", "reward_workers=0", "log.tensorboard=false", "algo.kl=null"]


def test_refusals():
    with pytest.raises(ConfigError, match="set rollout.strategy: ctrls_latent"):
        load_config(None, [*BASE, "algo.objective={name: ctrls_provisional}"])
    with pytest.raises(ConfigError, match="makes rows only algo.objective 'ctrls_provisional' trains"):
        load_config(None, [*BASE, "rollout.strategy={name: ctrls_latent}"])
    with pytest.raises(ConfigError, match="latents"):
        load_config(None, [*BASE, "rollout.strategy={name: ctrls_latent}", "algo.objective={name: ctrls_provisional, latents: 1}"])


def test_the_language_model_does_not_move(tmp_path):
    from covey.train.trainer import Trainer

    cfg = load_config("examples/tiny/ctrls_provisional.yaml", ["rollout.prompts_per_step=2", "rollout.group_size=2",
                      "task.params={digits: 1, n_train: 8, n_test: 2}", "eval.size=0", "reward_workers=0",
                      "log.progress=false", "log.tensorboard=false", f"log.dir={tmp_path}"])  # fmt: skip
    t = Trainer(cfg, tmp_path / "run")
    try:
        before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
        module = [p.detach().clone() for p in t.objective.module.parameters()]
        t.step()
        assert all(torch.equal(before[n], p) for n, p in t.model.named_parameters())
        assert any(not torch.equal(a, b) for a, b in zip(module, t.objective.module.parameters()))
    finally:
        t.close()
