"""Search self-play (`ssp`): the proposer's question is kept only when it can be verified, the solver
attempts at one question form a group, and the proposer is paid by their failure rate."""

import pytest

from covey.algos.registry import ADVANTAGES
from covey.envs import ENVS, Action
from covey.envs.ssp import proposer_reward, read_generated, valid_question
from covey.models.tiny import build_tiny_tokenizer
from covey.strategies import STRATEGIES
from tests.strategies.test_episodes import ScriptedEngine, context

pytest.importorskip("bm25s")

DOC = "Mogathvi is a country. Its capital is Dunta. It was founded in 1421. The river Pulmo flows through it."
ITEM = {"id": 0, "prompt": "What is the capital of Mogathvi?", "answer": "Dunta", "corpus": "generated:6:0"}
GOOD = "<question>Which city is the capital of the country through which the river Pulmo flows?</question>"


def search(q):
    return '<tool_call>{"name": "search", "arguments": {"query": "' + q + '"}}</tool_call>'


def test_the_reader_answers_from_the_documents_only_when_one_fact_is_asked():
    assert read_generated("Which city is the capital of the country through which the river Pulmo flows?", [DOC]) == "Dunta"
    assert read_generated("What country has Dunta as its capital?", [DOC]) == "Mogathvi"
    assert read_generated("When was the country whose capital is Dunta founded?", [DOC]) == "1421"
    assert read_generated("What is the capital and river of Mogathvi?", [DOC]) is None  # two facts asked
    assert read_generated("What is the capital of Zorvia?", [DOC]) is None  # no document named
    assert read_generated("Which city is the capital of Mogathvi?", []) is None


@pytest.mark.parametrize("question, queries, why", [
    (None, ["a", "b"], "no <question> block"),
    ("Capital?", ["a", "b"], "at least 10 words"),
    ("Is Dunta the capital of the country through which the river Pulmo flows, yes?", ["a", "b"], "answer is in the question"),
    (GOOD[10:-11], ["a"], "2 different searches"),
    (GOOD[10:-11], ["a", "a"], "2 different searches"),
    ("Which city is the capital of the country through which the river Osk flows, please?", ["a", "b"], "RAG check"),
])  # fmt: skip
def test_a_question_is_kept_only_when_it_can_be_verified(question, queries, why):
    got = valid_question(question, "Dunta", [DOC], queries, min_words=10, min_searches=2, rag=read_generated)
    assert why in got
    assert valid_question(GOOD[10:-11], "Dunta", [DOC], ["a", "b"], min_words=10, min_searches=2, rag=read_generated) is None
    assert "no search material" in valid_question(GOOD[10:-11], "Dunta", [], ["a", "b"], min_words=10, min_searches=2, rag=None)


def test_proposer_rewards():
    assert proposer_reward([1.0, 1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.6)
    assert proposer_reward([0.0, 0.0]) == 1.0 and proposer_reward([1.0]) == 0.0
    assert proposer_reward([1.0, 0.0, 0.0, 0.0], "intermediate_difficulty") == pytest.approx(4 * 0.25 * 0.75)
    assert proposer_reward([1.0, 1.0], "intermediate_difficulty") == 0.0  # too easy
    assert proposer_reward([1.0, 0.0], "intermediate_difficulty", left=0.5, right=1.0) == pytest.approx(4 * 1.0 * 0.5)


def play(outs, group, **env):
    tok = build_tiny_tokenizer()
    it = iter(outs)
    engine = ScriptedEngine(lambda p, k: (tok.encode(next(it)) + [tok.eos_token_id], "stop"))
    st = STRATEGIES.build("selfplay", {"env": {"name": "ssp", "n_solvers": 2, **env}, "layout": "concat", "max_turns": 6,
                                       "max_context_tokens": 4096})  # fmt: skip
    return st.rollout([ITEM], context([ITEM], engine, tok, group=group, max_new_tokens=200))


def test_a_kept_question_is_solved_by_a_group_of_attempts_and_pays_the_proposer_their_failure_rate():
    twice = [x for o in [search("Mogathvi capital"), search("river Pulmo"), GOOD] for x in (o, o)]
    batch, m = play(twice + ["Dunta", "Breta", "Breta", "Breta"], group=2)
    assert [it["role"] for it in batch.items] == ["proposer", "solver", "solver"] * 2
    assert batch.group.tolist() == [0, 1, 1, 0, 2, 2]  # the proposers of the item; each question's attempts
    # game 0: attempts [1, 0] -> proposer 1 - 0.5; game 1: [0, 0] -> 1.0
    assert batch.rewards.flatten().tolist() == [0.5, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert batch.step_rewards[0] == [0.0, 0.0, 0.5] and m["selfplay/solver/rows"] == 4
    adv = ADVANTAGES["grpo"].bind({})(batch).advantages.tolist()
    assert [round(a, 4) for a in adv] == [-0.7071, 0.7071, -0.7071, 0.7071, 0.0, 0.0]


def test_a_question_that_fails_verification_costs_the_format_penalty_and_no_solver_plays():
    batch, _ = play([search("Mogathvi capital"), search("river Pulmo"), "<question>Dunta?</question>"], group=1)
    assert [it["role"] for it in batch.items] == ["proposer"] and batch.rewards.tolist() == [[-1.0]]
    batch, _ = play([search("Mogathvi capital"), GOOD], group=1, format_penalty=0.0)  # one search only
    assert batch.rewards.tolist() == [[0.0]] and len(batch) == 1


def test_searches_past_max_calls_end_the_turn_of_that_role():
    env = ENVS.build("ssp", {"n_solvers": 1, "max_calls": 1, "min_searches": 1})
    env.reset(ITEM, seed=0)
    r = env.step(Action("", [], tool_calls=[_call("Mogathvi")]))
    assert r.info["agent"] == 0 and "Dunta" in r.messages[0]["content"]
    r = env.step(Action("", [], tool_calls=[_call("Pulmo")]))  # a second search: no question
    assert r.terminated and r.reward == -1.0 and "max_calls" in r.info["rejected"]
    with pytest.raises(ValueError, match="rag_check must be reader, none"):
        ENVS.build("ssp", {"rag_check": "llm"})
    with pytest.raises(ValueError, match="reward_type"):
        ENVS.build("ssp", {"reward_type": "acc"})


def _call(q):
    from covey.envs import ToolCall

    return ToolCall("search", {"query": q})
