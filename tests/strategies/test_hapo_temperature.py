"""HAPO's entropy-adaptive per-token sampling temperature: hand-checked vector (released
and signed), the engine's per-row temperatures, the strategy's state."""

import pytest
import torch

from covey.algos.surrogates import hapo_entropy_norm, hapo_entropy_stats
from covey.engine import SamplingParams, TorchEngine
from covey.engine.sampling import sample_tokens
from covey.models import build_tiny
from covey.strategies import STRATEGIES
from covey.strategies.hapo_temperature import EntropyTemperature

H = torch.tensor([[0.05, 0.2, 0.6, 1.0, 1.5, 2.5]])


@pytest.mark.parametrize("signed,want", [(False, [1.05, 1.0296, 1.0135, 1.006, 1.0, 1.05]),
                                         (True, [0.95, 0.9704, 0.9865, 0.994, 1.0, 1.05])])  # fmt: skip
def test_spec_vector(signed, want):
    stats = hapo_entropy_stats(H, torch.ones_like(H), 0.8)
    assert stats[0] == pytest.approx(0.4055, abs=1e-4) and stats[1] == pytest.approx(1.6779, abs=1e-4)
    rule = EntropyTemperature(1.0, 0.05, stats, signed)
    assert rule.entropy_temperature(H)[0].tolist() == pytest.approx(want, abs=1e-4)
    # the same statistics as the hapo surrogate's normalisation (one home)
    h_hat = hapo_entropy_norm(H, torch.ones_like(H), 0.8, signed)
    assert torch.allclose(rule.entropy_temperature(H), 1 + 0.05 * h_hat.clamp(-1, 1))


def test_rule_reads_the_entropy_of_the_tempered_logits():
    z = torch.tensor([[2.0, 1.0, 0.0], [0.5, 0.5, -1.0]])
    rule = EntropyTemperature(0.7, 0.05, hapo_entropy_stats(H, torch.ones_like(H), 0.8), True)
    p = torch.softmax(z / 0.7, -1)
    assert torch.allclose(rule(z), rule.entropy_temperature(-(p * p.log()).sum(-1)))


def test_sample_tokens_with_one_temperature_per_row():
    z = torch.tensor([[2.0, 1.0, 0.0], [0.5, 0.5, -1.0]])
    t = torch.tensor([0.5, 2.0])
    tok, lp, _ = sample_tokens(z, temperature=t, greedy=False, uniforms=torch.tensor([0.3, 0.8]))
    want = torch.log_softmax(z / t[:, None], -1).gather(-1, tok[:, None]).squeeze(-1)
    assert torch.allclose(lp, want)


def test_engine_applies_the_rule_and_returns_the_sampled_distribution_s_logprobs():
    model, tok = build_tiny("tiny-llama", seed=2)
    eng = TorchEngine(model, tok, dtype="fp32")
    prompts = [[5, 6, 7], [9, 4]]
    base = SamplingParams(seed=11, max_new_tokens=5, ignore_eos=True)
    hot = eng.generate(prompts, 2, SamplingParams(seed=11, max_new_tokens=5, ignore_eos=True, temperature=2.0))
    ruled = eng.generate(prompts, 2, SamplingParams(**{**base.__dict__, "temperature_rule": lambda z: torch.full((len(z),), 2.0)}))
    assert torch.equal(hot.completion_ids, ruled.completion_ids)
    assert torch.allclose(hot.logprobs, ruled.logprobs)


def test_strategy_adapts_from_the_second_step_and_keeps_its_state():
    from covey.samplers import Draw
    from covey.strategies.base import RolloutContext

    model, tok = build_tiny("tiny-llama", seed=2)
    items = [{"id": 1, "prompt": "a"}, {"id": 2, "prompt": "b"}]
    ctx = RolloutContext(engine=TorchEngine(model, tok, dtype="fp32"), tokenizer=tok, draws=[Draw(it, 2) for it in items],
                         sampling=lambda r: SamplingParams(seed=7 + r, max_new_tokens=6, ignore_eos=True),
                         score=lambda b: {}, draw=lambda k: [])  # fmt: skip
    s = STRATEGIES.build("hapo_temperature", {"tau": 0.5})  # the default is the released rule (h_hat >= 0)
    assert not s.signed
    b1, m1 = s.rollout(items, ctx)
    assert m1["hapo/adaptive"] == 0.0 and not b1.recompute_old_logprobs and s.stats is not None
    b2, m2 = s.rollout(items, ctx)
    assert m2["hapo/adaptive"] == 1.0 and b2.recompute_old_logprobs
    assert m2["hapo/temperature_min"] >= 1.0 and m2["hapo/temperature_max"] > 1.0  # released: never cooler than T
    t = STRATEGIES.build("hapo_temperature", {"tau": 0.5, "signed": True})  # the abstract's reading: some tokens run cooler
    t.load_state_dict(s.state_dict())
    assert t.stats == s.stats and t.signed
    _, m3 = t.rollout(items, ctx)
    assert m3["hapo/temperature_min"] < 1.0 < m3["hapo/temperature_max"]


def test_an_engine_without_temperature_rules_is_refused_by_name():
    from covey.registry import RegistryError
    from covey.strategies.base import check_engine_protocols

    check_engine_protocols("hapo_temperature", {}, "torch")
    with pytest.raises(RegistryError, match="per-token temperature rules"):
        check_engine_protocols("hapo_temperature", {}, "vllm")
