"""soft_grpo / soft_thinking (SofT-GRPO, arXiv 2511.06411; zz1358m/SofT-GRPO-master 2b9d8ec): the Gumbel
log-density and the soft weights by hand (the spec's vector), the learner's scores equal the engine's behaviour
log-probs, and the configs refused."""

import math

import pytest
import torch

from covey.engine import SamplingParams, TorchEngine
from covey.engine.soft import SoftParams, gumbel_log_density, soft_token_logprob, soft_weights
from covey.models import load
from covey.objectives.soft_grpo import soft_logprobs
from covey.rollouts import Rollouts, RolloutsError
from covey.train.config import ConfigError, load_config


def test_log_density_and_weights_match_the_spec_vector():
    # p~ = [0.6, 0.3, 0.1], g = [0.1, -0.5, -1.0]: z = g - log(p~ + 1e-6) = [0.6108, 0.7040, 1.3026]
    # f = -z - exp(-z) = [-1.1537, -1.1986, -1.5744], all log p~ > -3: mean -1.3089; weights softmax(g / 0.1)
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1]))
    lp = soft_token_logprob(logits, torch.tensor([0, 1, 2]), torch.tensor([0.1, -0.5, -1.0]))
    assert float(lp) == pytest.approx(-1.3089, abs=1e-4)
    assert soft_weights(torch.tensor([0.1, -0.5, -1.0]), 0.1).tolist() == pytest.approx([0.9975, 0.0025, 0.0000], abs=1e-4)
    assert float(gumbel_log_density(torch.tensor(0.0))) == -1.0


def test_unlikely_candidates_leave_the_mean_and_z_is_clamped():
    # p~ = [0.97, 0.03]: log 0.03 = -3.5 <= -3, so only the first counts; g = 10 -> z clamped to 3
    logits = torch.log(torch.tensor([0.97, 0.03]))
    lp = soft_token_logprob(logits, torch.tensor([0, 1]), torch.tensor([10.0, 0.0]))
    assert float(lp) == pytest.approx(-3 - math.exp(-3))


def _model():
    model, tok = load("tiny-llama", initializer_range=0.2, seed=3)
    return model.float().eval(), tok


def test_the_learner_scores_soft_rows_as_the_engine_sampled_them():
    model, tok = _model()
    engine = TorchEngine(model, tok, dtype="fp32")
    prompts = [[5, 6, 7], [9, 10]]
    sp = SamplingParams(max_new_tokens=6, seed=2, ignore_eos=True)  # no truncation: rollout and learner renormalise alike
    gen, ids, scores = engine.generate_soft(prompts, 2, sp, SoftParams(top_k=4, gumbel_temperature=0.5, soft_tokens=3))
    batch = Rollouts.from_generation(gen, group=gen.prompt_index, items=[{"id": int(i)} for i in gen.prompt_index])
    batch.soft_ids, batch.soft_scores = ids, scores
    batch.validate()
    soft = torch.stack([(s[:, 1:] != 0).any(-1) for s in ids])
    assert soft[:, :3].all() and not soft[:, 3:].any()  # the first 3 positions are soft
    with torch.no_grad():
        lp = soft_logprobs(model, batch, temperature=1.0, tau=0.5)
    assert torch.allclose(lp, gen.logprobs, atol=2e-4)
    # the engine's tensors may be saved for backward (not inference tensors): the loss path backpropagates
    assert not any(t.is_inference() for t in [*ids, *scores, *gen.prompt_ids, gen.completion_ids])
    soft_logprobs(model, batch, temperature=1.0, tau=0.5).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_soft_fields_are_validated():
    model, tok = _model()
    engine = TorchEngine(model, tok, dtype="fp32")
    gen, ids, scores = engine.generate_soft([[5, 6]], 1, SamplingParams(max_new_tokens=3, seed=0, ignore_eos=True), SoftParams(top_k=2))
    batch = Rollouts.from_generation(gen, group=torch.zeros(1, dtype=torch.long), items=[{"id": 0}])
    batch.soft_ids = ids
    with pytest.raises(RolloutsError, match="set together"):
        batch.validate()
    batch.soft_scores = [scores[0][:2]]
    with pytest.raises(RolloutsError, match="soft_ids\\[0\\]"):
        batch.validate()


class PlainEngine:
    """An engine without soft thinking (for the refusal below)."""

    pad_token_id, version = 0, 0

    def __init__(self, model, tokenizer): ...

    def generate(self, prompts, n, sampling): ...

    def load_weights(self, source, version=None): ...

    def close(self): ...


BASE = ["model.name=tiny-llama", "task.name=arithmetic", "reward_workers=0", "log.tensorboard=false", "algo.kl=null"]


def test_refusals():
    with pytest.raises(ConfigError, match="makes rows only algo.objective 'soft_grpo' trains"):
        load_config(None, [*BASE, "rollout.strategy={name: soft_thinking}"])
    with pytest.raises(ConfigError, match="scores soft tokens: set rollout.strategy: soft_thinking"):
        load_config(None, [*BASE, "algo.objective={name: soft_grpo}"])
    with pytest.raises(ConfigError, match="SoftThinkingEngine"):
        load_config(None, [*BASE, "rollout.strategy={name: soft_thinking}", "algo.objective={name: soft_grpo}",
                           "engine={name: 'tests.objectives.test_soft_grpo:PlainEngine'}"])
    with pytest.raises(ConfigError, match="KL loss needs the reference's log-densities"):
        load_config(None, [*BASE[:4], "algo.kl={name: k3, coef: 0.001}", "rollout.strategy={name: soft_thinking}",
                           "algo.objective={name: soft_grpo}"])
