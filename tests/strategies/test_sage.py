"""SAGE (reconstructed): the skill_library env, the skill-integrated reward rule by hand, and the sequential
rollout over a chain with a scripted engine; a 2-step CLI run of the example."""

from pathlib import Path

import pytest

from covey.envs import ENVS, Action, parse_tool_calls
from covey.envs.skills import check_skill
from covey.models.tiny import build_tiny_tokenizer
from covey.strategies import STRATEGIES
from covey.strategies.sage import skill_bonus
from covey.tasks.skill_chains import SkillChains
from covey.train.config import load_config
from tests.strategies.test_episodes import ScriptedEngine, context
from tests._cli import train_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "skill_chains_sage.yaml"
SAVE = '<tool_call>{"name": "save_skill", "arguments": {"name": "perimeter", "params": ["a", "b"], "expression": "2*(a+b)"}}</tool_call>'


def use(a, b):
    return '<tool_call>{"name": "use_skill", "arguments": {"name": "perimeter", "args": {"a": %d, "b": %d}}}</tool_call>' % (a, b)


def act(text):
    return Action(text, [], parse_tool_calls(text))


# ------------------------------------------------------------------------------------------ the env
def test_skills_are_saved_used_and_reported():
    env = ENVS.build("skill_library", {"max_calls": 3})
    first = env.reset({"id": 0, "prompt": "p", "answer": "22"}, seed=0)
    assert "Saved skills:\nnone" in first.messages[0]["content"]
    r = env.step(act(SAVE))
    assert r.messages[0]["content"] == "saved perimeter(a, b)" and r.info["tool_errors"] == 0
    assert r.info["columns"] == {"skills_after": {"perimeter": {"params": ["a", "b"], "expression": "2*(a+b)"}},
                                 "skills_made": ["perimeter"], "skills_used": []}  # fmt: skip
    r = env.step(act(use(4, 7)))
    assert r.messages[0]["content"] == "22" and r.info["columns"]["skills_used"] == []  # its own skill: not an inherited one
    end = env.step(act("22"))
    assert end.terminated and end.reward == 1.0 and end.info["success"]
    # the next task inherits the library: using it counts, rewriting it first does not
    lib = end.info["columns"]["skills_after"]
    nxt = ENVS.build("skill_library", {})
    assert "perimeter(a, b) = 2*(a+b)" in nxt.reset({"id": 1, "prompt": "q", "answer": "30", "skill_library": lib}, seed=0).messages[0]["content"]
    assert nxt.step(act(use(5, 10))).info["columns"]["skills_used"] == ["perimeter"]
    again = ENVS.build("skill_library", {})
    again.reset({"id": 1, "prompt": "q", "answer": "30", "skill_library": lib}, seed=0)
    again.step(act(SAVE))
    assert again.step(act(use(5, 10))).info["columns"]["skills_used"] == []


def test_bad_skills_and_calls_are_tool_errors_never_code():
    assert check_skill("x", ["a"], "__import__('os').system('ls')") is not None
    assert check_skill("x", ["a"], "a.__class__") is not None
    assert check_skill("2bad", ["a"], "a") is not None and check_skill("x", ["a", "a"], "a") is not None
    assert check_skill("x", ["a"], "a/0") == "division by zero"
    env = ENVS.build("skill_library", {"max_skills": 1})
    env.reset({"id": 0, "prompt": "p", "answer": "1"}, seed=0)
    r = env.step(act(SAVE + SAVE.replace("perimeter", "other") + use(1, 2).replace('"b": 2', '"b": "x"')
                     + '<tool_call>{"name": "use_skill", "arguments": {"name": "nope", "args": {}}}</tool_call>'))  # fmt: skip
    texts = [m["content"] for m in r.messages]
    assert texts[0].startswith("saved") and "library is full" in texts[1] and "every argument must be a number" in texts[2]
    assert "no skill 'nope'" in texts[3] and r.info["tool_errors"] == 3
    with pytest.raises(ValueError, match="is not valid"):
        env.reset({"id": 0, "prompt": "p", "answer": "1", "skill_library": {"x": {"params": ["a"], "expression": "b"}}}, seed=0)


def test_saving_and_using_skills_without_the_answer_earns_nothing():
    """The adversary: fill the turns with skill work, never answer right."""
    env = ENVS.build("skill_library", {"max_calls": 2})
    env.reset({"id": 0, "prompt": "p", "answer": "22"}, seed=0)
    results = [env.step(act(SAVE)), env.step(act(use(4, 7)))]
    assert results[-1].truncated and sum(r.reward for r in results) == 0.0
    chain = [{"success": False, "made": ["perimeter"], "used": []}, {"success": False, "made": [], "used": ["perimeter"]}]
    assert skill_bonus(chain) == [0.0, 0.0]


# ------------------------------------------------------------------------------------------ the reward rule
def test_skill_bonus_credits_a_reused_skill_and_a_successful_use():
    made, used, none = ["s"], ["s"], []
    ep = lambda ok, m, u: {"success": ok, "made": m, "used": u}  # noqa: E731
    assert skill_bonus([ep(True, made, none), ep(True, none, used)]) == [1.0, 1.0]
    assert skill_bonus([ep(False, made, none), ep(True, none, used)]) == [1.0, 1.0]  # generation credited on the later success
    assert skill_bonus([ep(True, made, none), ep(False, none, used)]) == [0.0, 0.0]  # a failed use credits nobody
    assert skill_bonus([ep(True, ["t"], none), ep(True, none, used)]) == [0.0, 1.0]  # it used another skill
    assert skill_bonus([ep(True, made, none), ep(True, none, none), ep(True, none, used)], bonus=0.5) == [0.5, 0.0, 0.5]


# ------------------------------------------------------------------------------------------ the sequential rollout
def test_a_chain_carries_its_library_to_the_next_task_and_is_rewarded_for_it():
    tok = build_tiny_tokenizer()
    item = {"id": 0, "prompt": "A rectangle has sides 4 and 7. What is its perimeter?", "answer": "22",
            "chain": [{"id": 9, "prompt": "A rectangle has sides 5 and 10. What is its perimeter?", "answer": "30"}]}  # fmt: skip

    def script(prompt, k):
        text = tok.decode(prompt)
        if "sides 4 and 7" in text:  # position 0: chain 0 saves the skill then answers; chain 1 answers wrong
            chain0 = script.n0 = getattr(script, "n0", 0) + 1
            if chain0 == 1:
                return tok.encode(SAVE), "stop"
            return tok.encode("22" if "saved perimeter" in text else "5"), "stop"
        if "perimeter(a, b) = 2*(a+b)" in text and "sides 5 and 10" in text and "30" not in text.split("sides 5 and 10")[-1]:
            return tok.encode(use(5, 10)), "stop"  # position 1, chain 0: the inherited skill
        return tok.encode("30"), "stop"

    engine = ScriptedEngine(script)
    strat = STRATEGIES.build("sage_provisional", {"env": {"name": "skill_library"}, "inner_params": {"layout": "concat"}})
    batch, m = strat.rollout([item], context([item], engine, tok, group=2))
    rows = {(int(g), int(e)): i for i, (g, e) in enumerate(zip(batch.group, batch.episode))}
    assert sorted(g for g, _ in rows) == [0, 0, 1, 1] and batch.prompt_id.tolist() == [0, 0, 9, 9]
    assert batch.reward_names == ("env_return", "skill_bonus")
    # chain 0: made the skill and answered (1 + 1 for its reuse), then used it and answered (1 + 1);
    # chain 1: wrong (0), then right without a skill (1)
    assert batch.rewards.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]
    assert batch.items[2]["skill_library"] == {"perimeter": {"params": ["a", "b"], "expression": "2*(a+b)"}}
    assert batch.items[3]["skill_library"] == {}
    assert m["sage/made_skill_frac"] == 0.5 and m["sage/used_skill_frac"] == 0.5 and len(set(batch.episode.tolist())) == 4


def test_sage_config_and_task_errors():
    assert load_config(EXAMPLE, []).rollout.strategy.name == "sage_provisional"
    with pytest.raises(ValueError, match="needs an environment"):
        load_config(EXAMPLE, ["env=null"])
    with pytest.raises(ValueError, match="bonus must be >= 0"):
        STRATEGIES.build("sage_provisional", {"env": {"name": "skill_library"}, "bonus": -1})
    with pytest.raises(ValueError, match="unknown scenarios"):
        SkillChains(scenarios=["flying"])
    items = SkillChains(n_train=4, chain_length=3, seed=2).examples()
    assert [len(x["chain"]) for x in items] == [2] * 4 and len({c["id"] for x in items for c in x["chain"]} | {x["id"] for x in items}) == 12
    assert all(c["scenario"] == x["scenario"] for x in items for c in x["chain"])


@pytest.mark.slow  # one CLI run: 2 steps of the SAGE example with the tiny model
def test_covey_train_runs_the_skill_chains_sage_example_for_two_steps(tmp_path):
    steps = train_example("agents/skill_chains_sage.yaml", tmp_path / "run", 'model.name=tiny-llama', 'sampling.max_new_tokens=8')
    assert all(s["sage/chains"] >= 1 for s in steps)