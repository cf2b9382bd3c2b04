"""direct_advantage_provisional (arXiv 2412.18279, reconstructed): the loss by hand, the step data builder with a
scripted engine, the critic, and the configs it refuses."""

import pytest
import torch

from covey.objectives.critic import ValueCritic
from covey.objectives.direct_advantage import direct_advantage_loss
from covey.objectives.step_data import build_step_data, split_steps
from covey.engine.base import SamplingParams
from covey.train.config import ConfigError, load_config
from tests.strategies._fake_engine import CharTok, ScriptedEngine


def test_loss_matches_the_spec_vector():
    # beta 0.1; one token per step: log-ratios [0.2, -0.2, 0]; (0.02 - 0.3)^2, (-0.02 + 0.2)^2, 0 -> mean 0.0369
    logp = torch.tensor([[-2.0], [-3.0], [-1.5]])
    ref = torch.tensor([[-2.2], [-2.8], [-1.5]])
    err, ratio = direct_advantage_loss(logp, ref, torch.ones(3, 1), torch.tensor([0.3, -0.2, 0.0]), 0.1)
    assert float(err.mean()) == pytest.approx((0.28**2 + 0.18**2) / 3, abs=1e-6)  # 0.036933 (the spec rounds: 0.0369)
    assert ratio.tolist() == pytest.approx([0.2, -0.2, 0.0])


def test_sequence_log_ratio_sums_tokens_and_skips_padding():
    logp = torch.tensor([[-1.0, -2.0, -9.0]])
    ref = torch.tensor([[-1.5, -1.0, 0.0]])
    err, ratio = direct_advantage_loss(logp, ref, torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([0.0]), 2.0)
    assert ratio.tolist() == pytest.approx([-0.5]) and err.tolist() == pytest.approx([1.0])  # (2 x -0.5 - 0)^2


def test_split_steps():
    assert split_steps("a\nb\n\nc") == ["a\n", "b\n", "\n", "c"]
    assert split_steps("") == [] and split_steps("one") == ["one"] and split_steps("x;y;", ";") == ["x;", "y;"]


def test_critic_fits_targets_and_survives_a_save(tmp_path):
    critic = ValueCritic.from_name("tiny-llama", seed=0)
    seqs = [[5, 6, 7], [8, 9], [5, 6, 7, 10], [11]]
    targets = torch.tensor([1.0, 0.0, 1.0, 0.0])
    before = float((critic.values(seqs) - targets).pow(2).mean())
    after = critic.fit(seqs, targets, steps=60, lr=3e-3, generator=torch.Generator().manual_seed(0))
    assert after < before / 4
    critic.save(tmp_path / "c.pt")
    again = ValueCritic.load(tmp_path / "c.pt")
    assert torch.allclose(again.values(seqs), critic.values(seqs), atol=1e-6)
    with pytest.raises(ValueError, match="does not exist"):
        ValueCritic.load(tmp_path / "none.pt")


def test_builder_values_states_fits_the_critic_and_writes_candidates():
    def rule(prompt, k):  # the solution "3\n4\n"; continuations and candidates from any state: "4\n" / "x\n"
        return "3\n4\n" if prompt.endswith("Q") and k == 0 and not rule.started else ("4\n" if k % 2 == 0 else "x\n")

    rule.started = False
    engine = ScriptedEngine(rule)

    def generate(prompts, n, sampling, _gen=engine.generate):
        out = _gen(prompts, n, sampling)
        rule.started = True
        return out

    engine.generate = generate
    verify = lambda items, texts: [float(t.strip().endswith("4")) for t in texts]  # noqa: E731
    critic = ValueCritic.from_name("tiny-llama", seed=0)
    items = [{"id": 0, "prompt": "Q", "answer": "4"}]
    rows, m = build_step_data(engine, CharTok(), critic, items, verify, sampling=SamplingParams(max_new_tokens=8, seed=0),
                              k=2, mc=2, max_states=2, critic_steps=5)  # fmt: skip
    # states "" and "3\n"; each has MC continuations "4\n", "x\n" -> value 1/2; the whole solution ends in 4 -> 1
    assert m["states"] == 2 and m["mc_value_mean"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert [r["prefix"] for r in rows] == ["", "3\n"] and all(r["candidates"] == ["4\n", "x\n"] for r in rows)
    assert all(len(r["advantages"]) == 2 and r["answer"] == "4" for r in rows)


BASE = ["model.name=tiny-llama", "reward_workers=0", "log.tensorboard=false",
        "task.params={path: examples/tiny/direct_advantage/steps.jsonl, verifier: none}"]  # fmt: skip


def test_refuses_a_run_without_offline_data(tmp_path):
    with pytest.raises(ConfigError, match="trains on offline step data: set rollout.strategy: offline_steps"):
        load_config(None, ["task.name=arithmetic", "algo.objective={name: direct_advantage_provisional}", *BASE[:3]])


def test_refuses_data_without_critic_advantages(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "Q", "prefix": "", "candidates": ["a"]}\n')
    with pytest.raises(ConfigError, match="needs a critic's advantages"):
        load_config(None, [*BASE[:3], "task.name=dataset", f"task.params={{path: {data}, verifier: none}}",
                           "rollout.strategy={name: offline_steps}", "algo.objective={name: direct_advantage_provisional}"])


def test_refuses_a_bad_beta_and_an_unknown_objective(tmp_path):
    with pytest.raises(ConfigError, match="beta"):
        load_config(None, [*BASE, "task.name=dataset", "rollout.strategy={name: offline_steps}",
                           "algo.objective={name: direct_advantage_provisional, beta: -1}"])
    with pytest.raises(ConfigError, match="unknown objective .nope.; known: .*direct_advantage_provisional"):
        load_config(None, [*BASE, "task.name=dataset", "rollout.strategy={name: offline_steps}", "algo.objective={name: nope}"])
