"""The `local` judge on tiny-llama (random weights, so its verdicts are noise): the plumbing -- batched greedy
decoding through TorchEngine, determinism, parse-failure counting, caching (memory and SQLite), the
log-prob YES/NO scorer -- and `covey train` for 2 steps with a local judge reward."""

import json
import math
import subprocess
import sys

import pytest
import torch

from covey.models.chat import apply_chat
from covey.rewards import get_reward
from covey.rewards.judge.backends import JudgeRequest, LocalBackend, _LOADED

TEMPLATE = "Is {completion} equal to {answer}? Reply YES or NO."


def test_local_backend_batched_greedy_is_deterministic_and_loaded_once():
    b = LocalBackend("tiny-llama")
    reqs = [JudgeRequest((("user", f"question {i}"),), max_new_tokens=6) for i in range(5)]
    first = b.complete(reqs)
    assert all(r.error is None and isinstance(r.text, str) for r in first)
    assert [r.text for r in b.complete(reqs)] == [r.text for r in first]  # greedy: the same replies
    assert [b.complete([r])[0].text for r in reqs[:2]] == [r.text for r in first[:2]]  # batching does not change them
    assert sum(1 for k in _LOADED if k[0] == "tiny-llama" and k[3] == 0) == 1  # one copy per process
    long = JudgeRequest((("user", "x" * 2000),), max_new_tokens=4)  # tiny-llama holds 1024 positions
    assert "at most" in b.complete([long])[0].error


def test_judge_reward_counts_parse_failures_and_caches(monkeypatch, tmp_path):
    params = dict(backend={"kind": "local", "model": "tiny-llama"}, template=TEMPLATE, parser="yes_no", max_new_tokens=5,
                  parse_retries=1, on_fail="zero", cache_file=str(tmp_path / "judge_cache.sqlite"))
    reward = get_reward("judge", **params)
    calls = []
    real = reward.judge.backend.complete
    monkeypatch.setattr(reward.judge.backend, "complete", lambda reqs: calls.append(len(reqs)) or real(reqs))
    completions, answers = ["4", "5", "4", "12"], ["4", "4", "4", "12"]
    out = reward(prompts=["q"] * 4, completions=completions, answer=answers)
    failed = [f == 1.0 for f in out.metrics["parse_fail_frac"]]
    assert len(out.scores) == 4 and all(s in (0.0, 1.0) for s in out.scores)
    assert all(s == 0.0 for s, f in zip(out.scores, failed) if f)  # on_fail: zero
    assert calls[0] == 3  # rows 0 and 2 render the same prompt: asked once
    assert len(calls) == (2 if any(failed) else 1)  # the unreadable replies are asked once more
    assert out.metrics["judge_requests"][0] == pytest.approx(sum(calls) / 4)
    parsed = [i for i, f in enumerate(failed) if not f]

    out2 = reward(prompts=["q"] * 4, completions=completions, answer=answers)
    assert out2.scores == out.scores and out2.metrics["cache_hit_frac"][0] == pytest.approx(len(parsed) / 4 if parsed else 0)
    fresh = get_reward("judge", **params)  # another process: only the SQLite file is shared
    if parsed:
        hit = fresh(prompts=["q"], completions=[completions[parsed[0]]], answer=[answers[parsed[0]]])
        assert hit.metrics["cache_hit_frac"] == [1.0] and hit.scores == [out.scores[parsed[0]]]


def test_yes_no_logits_is_the_softmax_of_the_two_first_tokens():
    reward = get_reward("judge", backend={"kind": "local", "model": "tiny-llama"}, template=TEMPLATE, parser="yes_no_logits")
    out = reward(prompts=["q", "q"], completions=["4", "5"], answer=["4", "4"])
    model, tok, _ = _LOADED[("tiny-llama", "fp32", "cpu", 0)]
    for score, completion in zip(out.scores, ["4", "5"]):
        ids = apply_chat(tok, [{"role": "user", "content": TEMPLATE.format(completion=completion, answer="4")}])
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
        y, n = logp[tok.encode("YES", add_special_tokens=False)[0]], logp[tok.encode("NO", add_special_tokens=False)[0]]
        assert score == pytest.approx(float(torch.sigmoid(y - n)), abs=1e-5)
    assert out.scores[0] != out.scores[1] and out.metrics["parse_fail_frac"] == [0.0, 0.0]


def test_covey_train_two_steps_with_a_local_judge_reward(tmp_path):
    judge = ("rewards=[{name: judge, weight: 0.5, params: {backend: {kind: local, model: tiny-llama, seed: 1}, "
             f"template: '{TEMPLATE}', max_new_tokens: 3, on_fail: zero, parse_retries: 0, "
             f"cache_file: {tmp_path / 'run' / 'judge_cache.sqlite'}}}}}]")
    cmd = [sys.executable, "-m", "covey.cli", "train", "model.name=tiny-llama", "task.name=arithmetic",
           "task.params={digits: 1, n_train: 8, n_test: 2}", "rollout.prompts_per_step=2", "rollout.group_size=2",
           "sampling.max_new_tokens=4", "reward_workers=1", "log.progress=false", "log.tensorboard=false", "algo.kl=null",
           "eval.size=0", "steps=2", judge, "--run-dir", str(tmp_path / "run")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/judge/mean" in r]
    assert len(steps) == 2
    for r in steps:
        assert math.isfinite(r["reward/judge/mean"]) and r["reward/judge/failures"] == 0.0
        assert 0.0 <= r["reward/judge/parse_fail_frac"] <= 1.0 and "reward/judge/verifier_agreement" in r
    assert (tmp_path / "run" / "judge_cache.sqlite").exists() or all(r["reward/judge/parse_fail_frac"] == 1.0 for r in steps)
