"""The two-agent `solver_verifier` environment, the agent of each turn in `Rollouts.step_agents`, and
Dr. MAS trained end to end on it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from covey.algos.registry import ADVANTAGES
from covey.envs import ENVS, Action, fork_env
from tests.strategies.test_episodes import ScriptedEngine, context, strategy
from covey.models.tiny import build_tiny_tokenizer

ITEM = {"id": 0, "prompt": [{"role": "user", "content": "2+3="}], "answer": "5"}


def act(text):
    return Action(text, [])


def test_solver_and_verifier_take_turns_until_approval():
    env = ENVS.build("solver_verifier", {"max_rounds": 3})
    first = env.reset(ITEM, seed=0)
    assert first.info["agent"] == 0 and first.messages[0]["content"].endswith("\n2+3=")
    r = env.step(act("it is 4"))
    assert r.info["agent"] == 1 and not r.done and "Solution: it is 4" in r.messages[0]["content"]
    r = env.step(act("reject"))
    assert r.info == {"agent": 0, "valid": True, "success": False} and "rejected" in r.messages[0]["content"]
    branch = fork_env(env)
    r = env.step(act("so 5"))
    assert r.info["agent"] == 1 and r.anchor == (1, 1)
    r = env.step(act("I APPROVE."))
    assert r.terminated and r.reward == 1.0 and r.info["success"]
    # the fork from before the second answer goes on its own way: a wrong answer, approved
    assert branch.step(act("6")).info["agent"] == 1 and branch.step(act("approve")).reward == 0.0


def test_last_round_has_no_verifier_and_a_verdict_without_a_word_is_an_invalid_reject():
    env = ENVS.build("solver_verifier", {"max_rounds": 2})
    env.reset(ITEM, seed=0)
    env.step(act("4"))
    r = env.step(act("hmm"))
    assert r.info["valid"] is False and r.info["agent"] == 0 and not r.done
    r = env.step(act("5"))  # round 2 of 2: no verifier turn
    assert r.terminated and r.reward == 1.0
    one = ENVS.build("solver_verifier", {"max_rounds": 1})
    one.reset(ITEM, seed=0)
    assert one.step(act("7")).reward == 0.0
    with pytest.raises(ValueError, match="max_rounds must be >= 1"):
        ENVS.build("solver_verifier", {"max_rounds": 0})


def test_episodes_record_each_turns_agent_and_dr_mas_is_the_same_in_both_layouts():
    tok = build_tiny_tokenizer()
    got = {}
    for layout in ("concat", "per_step"):
        # the live episodes' turns in order: ep0 "5", ep1 "4"; ep0 approve, ep1 reject; ep1 "4"; ep1 approve
        outs = iter(["5", "4", "approve", "reject", "4", "approve"])
        engine = ScriptedEngine(lambda p, k: (tok.encode(next(outs)) + [tok.eos_token_id], "stop"))
        st = strategy({"name": "solver_verifier", "max_rounds": 3}, layout=layout, max_turns=5)
        batch, m = st.rollout([ITEM], context([ITEM], engine, tok, group=2))
        first = {int(e): i for i, e in reversed(list(enumerate(batch.episode.tolist())))}
        assert [batch.step_agents[first[e]] for e in (0, 1)] == [[0, 1], [0, 1, 0, 1]]
        assert [batch.rewards[first[e]].item() for e in (0, 1)] == [1.0, 0.0]
        adv = ADVANTAGES["dr_mas"].bind({})(batch).advantages
        got[layout] = [sorted({round(float(a), 5) for a in adv[i][batch.completion_mask[i] > 0]})
                       for i in range(len(batch))]  # fmt: skip
        assert m["episodes/success_rate"] == 0.5
    # each agent: turns with returns [1, 0, 0] -> mean 1/3, std sqrt(1/3): ep0 +1.1547, ep1 -0.57735
    assert got["concat"] == [[1.1547], [-0.57735]]
    assert got["per_step"] == [[1.1547]] * 2 + [[-0.57735]] * 4


@pytest.mark.slow  # one CLI run: 2 steps of the two-agent example with the tiny model
def test_covey_train_runs_the_solver_verifier_dr_mas_example_for_two_steps(tmp_path):
    example = Path(__file__).parents[2] / "examples" / "agents" / "solver_verifier_dr_mas.yaml"
    run = tmp_path / "run"
    args = ["steps=2", "sampling.max_new_tokens=4", "reward_workers=0", "log.report_to=[jsonl]", "log.progress=false",
            "log.completions_every=1"]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "covey.cli", "train", str(example), "--run-dir", str(run), *args],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert s["episodes/count"] == 8 and 1 <= s["episodes/length_mean"] <= 3 and "adv/dr_mas/agents" in s
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    turns = [m for m in sample["episode"] if m["role"] == "assistant"]
    assert [m["agent"] for m in turns] == [0, 1, 0][: len(turns)]
