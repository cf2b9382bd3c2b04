"""TRACE (reconstructed, partial): capability checks by hand, the capability env over search_qa, the contrast
step with a scripted model, the configs the recipe writes, and a 2-step CLI run of the example."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from covey.envs import ENVS, Action, parse_tool_calls  # noqa: E402
from covey.envs.llm import Asker  # noqa: E402
from covey.envs.trace import check_capability, contrast, exercised  # noqa: E402
from covey.rewards.judge.backends import JudgeReply  # noqa: E402
from covey.tasks.search_qa import SearchQATask  # noqa: E402
from covey.train.config import load_config  # noqa: E402
from tests._cli import train_example  # noqa: E402

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "agents" / "trace_search_capability.yaml"
SEARCH_FIRST = {"name": "search first", "check": {"kind": "tool_before_answer", "tool": "search"}}


def turn(tools=(), errors=0, final=False, text=""):
    return {"text": text, "tools": list(tools), "tool_errors": errors, "final": final}


def test_each_check_by_hand():
    searched = [turn(["search"]), turn(final=True, text="<answer>x</answer>")]
    assert exercised(searched, {"kind": "tool_before_answer", "tool": "search"})
    assert not exercised([turn(["search"], errors=1), turn(final=True)], {"kind": "tool_before_answer", "tool": "search"})
    assert not exercised([turn(["search"])], {"kind": "tool_before_answer", "tool": "search"})  # never answered
    assert not exercised([turn(["calculator"]), turn(final=True)], {"kind": "tool_before_answer", "tool": "search"})
    assert exercised(searched, {"kind": "answer_tag"}) and not exercised([turn(final=True, text="x")], {"kind": "answer_tag"})
    assert exercised(searched, {"kind": "within_turns", "turns": 2}) and not exercised(searched, {"kind": "within_turns", "turns": 1})
    assert exercised(searched, {"kind": "no_tool_errors"}) and not exercised([turn(final=True)], {"kind": "no_tool_errors"})
    assert exercised(searched, {"kind": "answered"}) and not exercised([turn(["search"])], {"kind": "answered"})


def test_capability_specs_are_checked():
    assert check_capability(SEARCH_FIRST) is None
    assert "must be one of" in check_capability({"name": "x", "check": {"kind": "run_python", "code": "1"}})
    assert "takes ['tool']" in check_capability({"name": "x", "check": {"kind": "tool_before_answer", "tool": "s", "when": 1}})
    assert "needs 'turns'" in check_capability({"name": "x", "check": {"kind": "within_turns", "turns": "2"}})
    assert "needs a name" in check_capability({"check": {"kind": "answered"}})


def _call(query):
    text = '<tool_call>{"name": "search", "arguments": {"query": ' + json.dumps(query) + "}}</tool_call>"
    return Action(text, [], parse_tool_calls(text))


def test_the_capability_env_pays_for_the_capability_on_the_last_step():
    item = SearchQATask(n_entities=30, seed=5, n_train=4, n_test=1).examples()[0]
    env = ENVS.build("trace_provisional", {"base": {"name": "search_qa", "k": 1, "max_calls": 2}, "capability": SEARCH_FIRST,
                                           "base_weight": 1.0})  # fmt: skip
    env.reset(item, seed=0)
    r1 = env.step(_call("capital"))
    r2 = env.step(Action(item["answer"], []))
    assert r1.reward == 0.0 and r2.reward == 2.0 and r2.info["capability"] is True  # 1 (right) + 1 (searched first)
    env.reset(item, seed=0)
    r = env.step(Action(item["answer"], []))
    assert r.reward == 1.0 and r.info["capability"] is False  # right, but no search
    # the adversary: a broken search call, or the word "search" in the answer, is not the capability
    env.reset(item, seed=0)
    bad = '<tool_call>{"name": "search", "arguments": {"q": 1}}</tool_call>'
    env.step(Action(bad, [], parse_tool_calls(bad)))
    assert env.step(Action("I would search. " + item["answer"], [])).info["capability"] is False
    assert env.fork().turns == env.turns and env.fork().turns is not env.turns
    with pytest.raises(ValueError, match="base must be another env"):
        ENVS.build("trace_provisional", {"base": {"name": "trace_provisional"}, "capability": SEARCH_FIRST})


class Analyst:
    kind, fingerprint = "scripted", "scripted"

    def __init__(self, reply):
        self.reply, self.prompts = reply, []

    def complete(self, requests):
        self.prompts += [r.messages[-1][1] for r in requests]
        return [JudgeReply(text=self.reply) for _ in requests]


def test_contrast_keeps_only_capabilities_with_a_valid_check():
    proposals = [SEARCH_FIRST, {"name": "run code", "check": {"kind": "exec", "code": "rm"}}, SEARCH_FIRST,
                 {"name": "use tags", "description": "d", "check": {"kind": "answer_tag"}},
                 {"name": "be quick", "check": {"kind": "within_turns", "turns": 2}}]  # fmt: skip
    analyst = Analyst("```json\n" + json.dumps(proposals) + "\n```")
    episodes = [{"transcript": [{"role": "assistant", "content": "win"}], "success": True},
                {"transcript": [{"role": "assistant", "content": "lose"}], "success": False}]  # fmt: skip
    caps, counts = contrast(Asker(analyst), episodes, max_capabilities=2)
    assert [c["name"] for c in caps] == ["search first", "use tags"] and counts == {"proposed": 5, "kept": 2, "refused": 3}
    assert "win" in analyst.prompts[0] and "lose" in analyst.prompts[0]
    assert contrast(Asker(analyst), episodes[:1]) == ([], {"proposed": 0, "kept": 0, "refused": 0})  # nothing to contrast


def test_the_recipe_writes_one_lora_config_per_capability(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    base = load_config(ROOT / "examples" / "agents" / "search_qa_gigpo.yaml").model_dump(mode="json")
    (run / "config.yaml").write_text(__import__("yaml").safe_dump(base))
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps([SEARCH_FIRST, {"name": "tags", "check": {"kind": "answer_tag"}}]))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "trace_capabilities.py"), "--run", str(run), "--out",
                          str(tmp_path / "trace"), "--capabilities", str(caps)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    written = sorted((tmp_path / "trace").glob("capability_*.yaml"))
    assert len(written) == 2
    cfg = load_config(written[0])
    assert cfg.env.name == "trace_provisional" and cfg.model.lora.r == 8
    assert cfg.env.params["base"] == {"name": "search_qa", "k": 2, "max_calls": 2} and cfg.env.params["capability"] == SEARCH_FIRST


@pytest.mark.slow  # one CLI run: 2 steps of the TRACE example (LoRA) with the tiny model
def test_covey_train_runs_the_trace_example_for_two_steps(tmp_path):
    steps = train_example("agents/trace_search_capability.yaml", tmp_path / "run", 'model.name=tiny-llama', 'sampling.max_new_tokens=12', 'rollout.prompts_per_step=1')
    assert all(s["episodes/count"] == 4 for s in steps)