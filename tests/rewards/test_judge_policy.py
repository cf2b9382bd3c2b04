"""The `policy` judge backend (URPO): the trainer's engine judges, handed over by RewardRunner.set_context;
the cache is keyed by the policy version; the reward stays in the trainer's process; `covey train` with it."""

import json
import subprocess
import sys

import pytest
import torch
from types import SimpleNamespace

from covey.engine.torch_engine import TorchEngine
from covey.models.loading import load
from covey.rewards import RewardRunner, get_reward
from covey.rewards.judge.backends import JudgeRequest, LocalBackend

TEMPLATE = "Is {completion} equal to {answer}? Reply YES or NO."


@pytest.fixture(scope="module")
def policy():
    model, tok = load("tiny-llama", dtype="float32", seed=0)
    return TorchEngine(model.eval(), tok, dtype="fp32"), tok


def test_policy_backend_answers_like_the_same_weights_through_the_local_backend(policy):
    engine, tok = policy
    reward = get_reward("judge", backend={"kind": "policy"}, template=TEMPLATE, max_new_tokens=5, parse_retries=0)
    assert reward.needs_engine and reward.in_process
    reward.set_context(engine=engine, tokenizer=tok, policy_version=3)
    reqs = [JudgeRequest((("user", f"question {i}"),), max_new_tokens=5) for i in range(3)]
    mine = reward.judge.backend.complete(reqs)
    local = LocalBackend("tiny-llama", seed=0).complete(reqs)  # the same random-init weights, loaded separately
    assert [r.text for r in mine] == [r.text for r in local]
    assert reward.judge.backend.fingerprint == "policy@v3"


class YesEngine:
    """An engine that answers every prompt "YES" (so every reply parses) and counts its prompts."""

    version = 0
    max_positions = 1024

    def __init__(self, tok):
        self.tok, self.prompts = tok, 0

    def generate(self, prompts, n, sampling):
        assert sampling.greedy and n == 1
        self.prompts += len(prompts)
        ids = self.tok.encode("YES", add_special_tokens=False)
        return SimpleNamespace(completion_ids=torch.tensor([ids] * len(prompts)), lengths=torch.tensor([len(ids)] * len(prompts)))


def test_runner_hands_the_engine_over_and_the_cache_follows_the_policy_version(policy):
    _, tok = policy
    engine = YesEngine(tok)
    spec = {"name": "judge", "params": {"backend": {"kind": "policy"}, "template": TEMPLATE, "max_new_tokens": 4}}
    runner = RewardRunner([spec], workers=2)  # a worker is available, yet the policy judge stays in this process
    try:
        assert runner.needs_engine and runner.entries[0].in_process and runner.entries[0].payload is None
        runner.set_context(engine=engine, tokenizer=tok, policy_version=1)
        a = runner(["q", "q"], ["4", "5"], answer=["4", "4"])
        assert a.rewards[:, 0].tolist() == [1.0, 1.0] and engine.prompts == 2
        b = runner(["q", "q"], ["4", "5"], answer=["4", "4"])  # same version: served from the cache
        assert engine.prompts == 2 and b.metrics["reward/judge/cache_hit_frac"] == 1.0
        runner.set_context(engine=engine, tokenizer=tok, policy_version=2)  # new weights: asked again
        runner(["q", "q"], ["4", "5"], answer=["4", "4"])
        assert engine.prompts == 4 and runner.entries[0].fn.judge.backend.fingerprint == "policy@v2"
    finally:
        runner.close()


def test_policy_judge_without_an_engine_is_a_counted_failure():
    runner = RewardRunner([{"name": "judge", "params": {"backend": {"kind": "policy"}, "template": TEMPLATE}}], workers=0,
                          max_failed_steps=5)
    out = runner(["q"], ["4"], answer=["4"])
    assert out.failed[0, 0] and out.metrics["reward/judge/failures/exception"] == 1.0


def test_policy_backend_refuses_logit_scoring():
    with pytest.raises(ValueError, match="log-probs"):
        get_reward("judge", backend={"kind": "policy"}, template=TEMPLATE, parser="yes_no_logits")


def test_covey_train_two_steps_with_the_policy_as_judge(tmp_path):
    judge = ("rewards=[{name: judge, weight: 0.5, params: {backend: {kind: policy}, "
             f"template: '{TEMPLATE}', max_new_tokens: 3, on_fail: zero, parse_retries: 0}}}}]")
    cmd = [sys.executable, "-m", "covey.cli", "train", "model.name=tiny-llama", "task.name=arithmetic",
           "task.params={digits: 1, n_train: 8, n_test: 2}", "rollout.prompts_per_step=2", "rollout.group_size=2",
           "sampling.max_new_tokens=4", "reward_workers=1", "log.progress=false", "log.tensorboard=false", "algo.kl=null",
           "eval.size=0", "steps=2", judge, "--run-dir", str(tmp_path / "run")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert all(r["reward/judge/failures"] == 0.0 and r["reward/judge/judge_requests"] > 0 for r in rows)
