"""M-GRPO's main agent and sub-agents (`planner_executor`): the code's turn format, its main and sub-agent
rewards, delegation as a new conversation, and the trajectory alignment of the sub-agents."""

import pytest

from covey.algos.registry import ADVANTAGES
from covey.envs import ENVS, Action
from covey.envs.planner_executor import main_reward, sub_reward, turn_well_formed
from covey.envs.tools import parse_tool_calls
from covey.models.tiny import build_tiny_tokenizer
from covey.strategies import STRATEGIES
from tests.strategies.test_episodes import ScriptedEngine, context

pytest.importorskip("bm25s")

ITEM = {"id": 0, "prompt": "What is the capital of Mogathvi?", "answer": "Dunta", "corpus": "generated:6:0"}
DELEGATE = '<thinking>ask</thinking><tool_call>{"name": "delegate", "arguments": {"task": "capital of Mogathvi"}}</tool_call>'
SEARCH = '<thinking>look</thinking><tool_call>{"name": "search", "arguments": {"query": "Mogathvi"}}</tool_call>'


def act(text):
    return Action(text, [], parse_tool_calls(text))


def test_the_turn_format_of_the_code():
    assert turn_well_formed(DELEGATE) and turn_well_formed("<tool_call>{}</tool_call>")
    assert turn_well_formed("<thinking>a</thinking>\n<result>b</result>")
    assert not turn_well_formed("<result>b</result>")  # a result needs thinking first
    assert not turn_well_formed("<thinking>a</thinking> so <result>b</result>")  # text outside the tags
    assert not turn_well_formed("<thinking>a</thinking>")  # ends without a call or a result
    assert not turn_well_formed("<thinking>a<thinking></thinking><result>b</result>")  # unbalanced


def test_main_and_sub_agent_rewards():
    good, wrong = "<thinking>x</thinking><result>Dunta</result>", "<thinking>x</thinking><result>Breta</result>"
    assert main_reward([DELEGATE, good], "Dunta") == 1.0 and main_reward([DELEGATE, wrong], "Dunta") == 0.1
    assert main_reward(["Dunta"], "Dunta") == 0.0 and main_reward(["oops " + DELEGATE, good], "Dunta") == 0.0
    assert sub_reward([SEARCH, good], 1.0) == 1.0 and sub_reward([SEARCH, good], 0.1) == 0.1
    assert sub_reward([SEARCH, good], 0.0) == 0.1 and sub_reward([SEARCH, "Dunta"], 1.0) == 0.0


def test_a_delegation_opens_a_sub_agent_whose_result_goes_back_to_the_main_agent():
    env = ENVS.build("planner_executor", {})
    assert env.reset(ITEM, seed=0).info == {"agent": 0}
    r = env.step(act(DELEGATE))
    assert r.info["agent"] == 1 and r.info["thread"] == "sub:0" and r.messages[1]["content"] == "capital of Mogathvi"
    r = env.step(act(SEARCH))
    assert r.info["thread"] == "sub:0" and "Dunta" in r.messages[0]["content"]
    r = env.step(act("<thinking>found</thinking><result>Dunta</result>"))
    assert r.info == {"agent": 0} and r.messages == [{"role": "tool", "content": "Dunta"}]
    r = env.step(act("<thinking>so</thinking><result>Dunta</result>"))
    assert r.terminated and r.reward == 1.0 and r.info["rewards"] == {"sub:0": 1.0}
    env.reset(ITEM, seed=0)
    r = env.step(act('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'))
    assert r.info["agent"] == 0 and "the main agent's tool is 'delegate'" in r.messages[0]["content"]


def test_sub_agents_are_aligned_to_fixed_slots_and_each_level_is_its_own_group():
    tok = build_tiny_tokenizer()
    good, second = "<thinking>x</thinking><result>Dunta</result>", DELEGATE.replace("capital", "river")
    wrong = good.replace("Dunta", "Breta")
    # game 0 delegates twice and answers right, game 1 once and answers wrong: rounds in order of the two
    # games' acting conversations
    outs = [DELEGATE, DELEGATE, SEARCH, SEARCH, good, good, second, wrong, SEARCH, good, good]
    it = iter(outs)
    engine = ScriptedEngine(lambda p, k: (tok.encode(next(it)) + [tok.eos_token_id], "stop"))
    st = STRATEGIES.build("selfplay", {"env": {"name": "planner_executor"}, "layout": "concat", "max_turns": 8,
                                       "max_context_tokens": 4096, "thread_slots": {"sub": 2}})  # fmt: skip
    batch, m = st.rollout([ITEM], context([ITEM], engine, tok, group=2, max_new_tokens=200))
    assert [it["role"] for it in batch.items] == ["main", "sub", "sub", "main", "sub", "sub"]
    assert m["selfplay/sub/padded"] == 1 and m["selfplay/sub/dropped"] == 0 and batch.group.tolist() == [0, 1, 1, 0, 1, 1]
    # main: 1.0 (right) and 0.1 (well formed, wrong); the sub-agents of game 1 get 0.1 (its one sub repeated)
    assert [round(r, 4) for r in batch.rewards.flatten().tolist()] == [1.0, 1.0, 1.0, 0.1, 0.1, 0.1]
    adv = [round(a, 4) for a in ADVANTAGES["grpo"].bind({})(batch).advantages.tolist()]
    # main agents [1, 0.1]: +-1/sqrt(2); sub-agents [1, 1, 0.1, 0.1]: mean 0.55, unbiased std 0.5196 -> +-0.866
    assert adv == [0.7071, 0.866, 0.866, -0.7071, -0.866, -0.866]
