"""hnpg (HNPG, arXiv 2311.08384; YifeiZhou02/HNPG 7d7ace1): advantages by hand, the critic's two-source fit,
the offline rows of the strategy, and the configs it refuses."""

import json

import pytest
import torch

from covey.objectives.critic import ValueCritic
from covey.objectives.hnpg import hnpg_advantages
from covey.strategies.hnpg_offline import read_offline
from covey.train.config import ConfigError, load_config


def test_advantages_by_hand():
    # group 0: on-policy rows r [1, 0], Q [0.6, 0.2] -> V 0.4 -> A [0.6, -0.4]
    # group 1: offline samples Q [0.9, 0.3] and a logged row Q 5.0 (left out of V) -> V 0.6 -> A [0.3, -0.3], logged 0
    q = torch.tensor([0.6, 0.2, 0.9, 0.3, 5.0])
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    adv = hnpg_advantages(q, r, torch.tensor([0, 0, 1, 1, 1]), ["on", "on", "offline", "offline", "logged"])
    assert adv.tolist() == pytest.approx([0.6, -0.4, 0.3, -0.3, 0.0])


def test_critic_weights_each_source_equally():
    critic = ValueCritic.from_name("tiny-llama", seed=1)
    # 3 on-policy rows with target 1, 1 offline row with target 0; weights 1/3 and 1: the fit's error is
    # mean_on + mean_off, so the lone offline row counts as much as the three on-policy rows together
    seqs, targets = [[5], [6], [7], [8]], torch.tensor([1.0, 1.0, 1.0, 0.0])
    w = torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0])
    err = critic.fit(seqs, targets, steps=1, lr=0.0, weights=w)  # lr 0: the untrained head's error, V = 0
    assert err == pytest.approx(1.0 + 0.0)  # mean_on (1^2) + mean_off (0^2)


def test_offline_file_is_checked(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "completion": "", "reward": 1.0}) + "\n")
    with pytest.raises(ValueError, match="line 1 needs a prompt, a non-empty completion and a finite reward"):
        read_offline(str(bad))
    with pytest.raises(ValueError, match="does not exist"):
        read_offline(str(tmp_path / "none.jsonl"))


BASE = ["model.name=tiny-llama", "task.name=arithmetic", "reward_workers=0", "log.tensorboard=false"]


def test_refuses_hnpg_without_offline_data_or_with_a_feedback_sampler():
    with pytest.raises(ConfigError, match="mixes offline data into on-policy updates"):
        load_config(None, [*BASE, "algo.objective={name: hnpg}"])
    with pytest.raises(ConfigError, match="use the uniform sampler"):
        load_config(None, [*BASE, "algo.objective={name: hnpg}", "sampler={name: vade}",
                           "rollout.strategy={name: hnpg_offline, offline: examples/tiny/hnpg/offline.jsonl}"])
    with pytest.raises(ConfigError, match="critic_steps"):
        load_config(None, [*BASE, "algo.objective={name: hnpg, critic_steps: 0}",
                           "rollout.strategy={name: hnpg_offline, offline: examples/tiny/hnpg/offline.jsonl}"])


def test_strategy_adds_policy_samples_at_logged_prompts_and_the_logged_rows(tmp_path):
    import dataclasses

    from covey.engine.base import SamplingParams
    from covey.samplers.base import Draw
    from covey.strategies import STRATEGIES
    from covey.strategies.base import RolloutContext
    from tests.strategies._fake_engine import CharTok, ScriptedEngine, exact_score

    data = tmp_path / "off.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": p, "completion": c, "reward": r}) for p, c, r in
                              [("P1", "7", 1.0), ("P2", "9", 0.0), ("P3", "1", 1.0)]))  # fmt: skip
    strat = STRATEGIES.build("hnpg_offline", {"offline": str(data), "offline_group": 2})
    sp = SamplingParams(max_new_tokens=4, seed=0)
    items = [{"id": 0, "prompt": "Q", "answer": "5"}]
    ctx = RolloutContext(engine=ScriptedEngine(lambda p, k: "5" if p == "Q" else "z"), tokenizer=CharTok(),
                         draws=[Draw(item=it, n=2) for it in items], sampling=lambda r: dataclasses.replace(sp, seed=r),
                         score=exact_score, draw=lambda k: [])  # fmt: skip
    batch, m = strat.rollout(items, ctx)
    roles = [it.get("hnpg_role", "on") for it in batch.items]
    # 2 on-policy rows; 2 logged rows (one per on-policy row); 2 policy samples at each logged prompt
    assert roles == ["on", "on", "offline", "offline", "offline", "offline", "logged", "logged"]
    assert batch.group.tolist() == [0, 0, 1, 1, 2, 2, 1, 2]  # a logged row shares its prompt's group
    assert batch.rewards[:, 0].tolist() == [1.0, 1.0] + [0.0] * 6
    assert [it["logged_reward"] for it in batch.items[6:]] in ([1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0])
    assert m["hnpg/logged_rows"] == 2 and strat.state_dict()["pos"] == 2
