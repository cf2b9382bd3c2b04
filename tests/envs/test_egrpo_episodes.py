"""E-GRPO in agent episodes: search_qa reports the documents it retrieved, `episodes` with
``rewards: functions`` hands each episode (its final turn, its columns) to the reward functions, and
`entity_match` counts the gold entities in the retrieved evidence."""

import json
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from covey.envs import ENVS, Action, StepResult, parse_tool_calls  # noqa: E402
from covey.envs.search import make_corpus  # noqa: E402
from covey.models.tiny import build_tiny_tokenizer  # noqa: E402
from covey.rewards.entity import EntityMatchReward  # noqa: E402
from covey.rewards.scoring import Scorer  # noqa: E402
from covey.rewards import RewardRunner  # noqa: E402
from covey.strategies import STRATEGIES  # noqa: E402
from covey.tasks.search_qa import SearchQATask  # noqa: E402
from covey.train.config import load_config  # noqa: E402
from tests.strategies.test_episodes import ScriptedEngine, context  # noqa: E402
from tests._cli import train_example  # noqa: E402

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "search_qa_egrpo.yaml"


def call(query):
    text = '<tool_call>{"name": "search", "arguments": {"query": ' + json.dumps(query) + "}}</tool_call>"
    return Action(text, [], parse_tool_calls(text))


def _task():
    task = SearchQATask(n_entities=30, seed=5, n_train=6, n_test=2)
    return task, {d["name"]: d for d in make_corpus(30, 5)}


def test_search_qa_items_carry_the_country_and_the_answer_as_gold_entities():
    task, docs = _task()
    for item in task.examples("train"):
        country = next(n for n in docs if n in item["prompt"])
        assert item["entities"] == [country, item["answer"]]


def test_search_qa_reports_each_retrieved_document_once_in_order():
    task, docs = _task()
    item = task.examples("train")[0]
    name = next(n for n in docs if n in item["prompt"])
    env = ENVS.build("search_qa", {"k": 1, "max_calls": 3})
    assert env.reset(item, seed=0).info["columns"] == {"retrieved": []}
    first = env.step(call(name)).info["columns"]["retrieved"]
    assert first == [docs[name]["text"]]
    twin = env.fork()
    again = env.step(call(name)).info["columns"]["retrieved"]  # the same document again: not repeated
    assert again == first
    twin.step(call(next(n for n in docs if n != name)))
    assert len(twin.retrieved) == 2 and env.retrieved == first  # forks do not share the list
    end = env.step(Action("I think it is Brelo", []))
    assert end.terminated and end.info["columns"]["retrieved"] == first


def test_entity_match_reads_gamma_from_the_evidence_column_by_hand():
    reward = EntityMatchReward(evidence_column="retrieved", answer_tag=False, alpha=0.3)
    ents = [["Zorvia", "Quelmar"]] * 4
    retrieved = [["Zorvia is a country. Its capital is Quelmar."],  # gamma 1
                 ["Zorvia is a country."],  # gamma 0.5
                 [],  # gamma 0
                 ["Zorvia is a country. Its capital is Quelmar."]]  # fmt: skip
    # row 0 answers right (1.0); rows 1-3 are wrong: alpha * gamma / max gamma of the group (1.0, row 3)
    out = reward(["q"] * 4, ["Quelmar", "Brelo", "Brelo", "Quelmar is the capital of Zorvia"], group=[0, 0, 0, 0],
                 entities=ents, answer=["Quelmar"] * 4, retrieved=retrieved)  # fmt: skip
    assert list(out) == pytest.approx([1.0, 0.3 * 0.5, 0.0, 0.3])
    # the same texts without the evidence column: gamma is read from the final turn instead
    plain = EntityMatchReward(answer_tag=False, alpha=0.3)(["q"] * 4, ["Quelmar", "Brelo", "Brelo", "Quelmar is the capital of Zorvia"],
                                                           group=[0] * 4, entities=ents, answer=["Quelmar"] * 4)  # fmt: skip
    assert list(plain) == pytest.approx([1.0, 0.0, 0.0, 0.3])
    with pytest.raises(ValueError, match="evidence_column 'retrieved' is not a column"):
        reward(["q"], ["x"], group=[0], entities=[["A"]], answer=["A"])


def test_retrieving_every_entity_without_answering_never_earns_full_marks():
    """The adversary: search well, then dump the documents (or nothing) as the answer."""
    task, docs = _task()
    item = task.examples("train")[0]
    name = next(n for n in docs if n in item["prompt"])
    reward = EntityMatchReward(evidence_column="retrieved", answer_tag=False, alpha=0.3)
    finals = [docs[name]["text"], "", f"{name} {item['answer']} " * 3]
    out = reward(["q"] * 3, finals, group=[0, 0, 0], entities=[item["entities"]] * 3, answer=[item["answer"]] * 3,
                 retrieved=[[docs[name]["text"]]] * 3)  # fmt: skip
    assert max(out) <= 0.3


def _search_script(tok, docs, item):
    """Episode 0 searches the country then answers right; episode 1 answers at once, wrongly."""
    name = next(n for n in docs if n in item["prompt"])
    search = tok.encode('<tool_call>{"name": "search", "arguments": {"query": "' + name + '"}}</tool_call>')
    right, wrong = tok.encode(item["answer"]), tok.encode("Brelo")

    def script(prompt, k):
        first_turn = k == 0
        if first_turn:  # one engine call for both episodes: tell them apart by call order
            script.n = getattr(script, "n", 0) + 1
            return (search, "stop") if script.n % 2 == 1 else (wrong, "stop")
        return right, "stop"

    return script


def test_episodes_scored_by_the_reward_functions_read_the_final_turn_and_the_env_columns():
    tok = build_tiny_tokenizer()
    task, docs = _task()
    item = task.examples("train")[0]
    engine = ScriptedEngine(_search_script(tok, docs, item))
    strat = STRATEGIES.build("episodes", {"env": {"name": "search_qa", "k": 1, "max_calls": 2}, "rewards": "functions",
                                          "layout": "concat"})  # fmt: skip
    batch, metrics = strat.rollout([item], context([item], engine, tok, group=2))
    assert batch.rewards is None and "reward/mean" not in metrics and metrics["episodes/return_mean"] == 0.5
    name = next(n for n in docs if n in item["prompt"])
    assert [it["retrieved"] for it in batch.items] == [[docs[name]["text"]], []]
    assert batch.reward_text == [tok.decode(tok.encode(item["answer"]), skip_special_tokens=True), "Brelo"]
    runner = RewardRunner([{"name": "entity_match", "params": {"evidence_column": "retrieved", "answer_tag": False}}], workers=0)
    try:
        Scorer(runner, lambda b: ["decoded ids must not be read"] * len(b))(batch)
    finally:
        runner.close()
    # episode 0 retrieved both entities and answered right (1.0); episode 1 retrieved nothing, wrong (0.0)
    assert batch.reward_names == ("entity_match",) and batch.rewards[:, 0].tolist() == [1.0, 0.0]


def test_an_env_column_may_not_replace_an_item_column():
    class Sneaky:
        tools = None

        def reset(self, item, *, seed):
            return StepResult([{"role": "user", "content": "go"}])

        def step(self, action):
            return StepResult([], 1.0, terminated=True, info={"columns": {"answer": action.text}})

        def close(self):
            pass

    tok = build_tiny_tokenizer()
    ENVS.register("sneaky_columns_test")(Sneaky)
    item = {"id": 0, "prompt": "go", "answer": "42"}
    engine = ScriptedEngine(lambda p, k: (tok.encode("7"), "stop"))
    batch, m = STRATEGIES.build("episodes", {"env": {"name": "sneaky_columns_test"}}).rollout([item], context([item], engine, tok, group=1))
    assert len(batch) == 0 and m["episodes/end/env_error"] == 1.0


def test_reward_functions_on_episodes_need_rewards_functions():
    with pytest.raises(ValueError, match="set rollout.strategy.rewards: functions"):
        load_config(EXAMPLE, ["rollout.strategy.rewards=env"])
    cfg = load_config(EXAMPLE, [])
    assert cfg.rollout.strategy.params["rewards"] == "functions" and cfg.rewards[0].name == "entity_match"
    with pytest.raises(ValueError, match="'rewards': Input should be 'env' or 'functions'"):
        load_config(EXAMPLE, ["rollout.strategy.rewards=judge"])


@pytest.mark.slow  # one CLI run: 2 steps of the E-GRPO example with the tiny model
def test_covey_train_runs_the_search_qa_egrpo_example_for_two_steps(tmp_path):
    steps = train_example("agents/search_qa_egrpo.yaml", tmp_path / "run", 'model.name=tiny-llama', 'sampling.max_new_tokens=12', 'rollout.prompts_per_step=1')
    assert all("reward/entity_match/mean" in s and s["episodes/count"] == 4 for s in steps)