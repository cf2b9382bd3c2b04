"""STARLING (reconstructed): the text-game engine by hand, spec checks, the slot filler over many seeds, a
model's games kept only when playable, the shipped set, and a 2-step CLI run of the example."""

import copy
import json
import random
from pathlib import Path

import pytest

from covey.envs import ENVS, Action
from covey.envs.llm import Asker
from covey.envs.starling import Game, check_game
from covey.rewards.judge.backends import JudgeReply
from covey.tasks.starling import IDEAS, StarlingTask, generate_games, slot_fill
from covey.train.config import ConfigError, load_config
from tests._cli import train_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "agents" / "starling_grpo.yaml"
SPEC = {
    "title": "Tea", "intro": "Make tea.", "start": "hall",
    "rooms": {"hall": {"description": "A hall.", "exits": {"east": "kitchen"}},
              "kitchen": {"description": "A kitchen.", "exits": {"west": "hall"}}},
    "objects": {"tin": {"room": "hall", "container": True, "openable": True},
                "tea bag": {"inside": "tin", "portable": True},
                "kettle": {"room": "kitchen", "container": True},
                "stove": {"room": "kitchen", "usable": True},
                "rock": {"room": "hall"}},
    "goal": [{"in": ["tea bag", "kettle"]}, {"used": "stove"}],
    "walkthrough": ["open tin", "take tea bag", "go east", "put tea bag in kettle", "use stove"],
}  # fmt: skip


def test_the_engine_by_hand():
    g = Game(copy.deepcopy(SPEC))
    assert g.command("take tea bag") == ("You see no such thing.", False)  # inside the closed tin
    assert g.command("take rock") == ("The rock will not move.", False)
    assert g.command("open tin") == ("You open the tin. Inside: tea bag.", True)
    assert g.command("open tin")[1] is False  # already open
    assert g.command("take tea bag") == ("You take the tea bag.", True)
    assert g.command("go north") == ("You cannot go that way.", False)
    assert g.command("use stove") == ("Nothing happens.", False)  # not here
    assert g.command("east")[1] and g.room == "kitchen"  # a direction alone moves too
    assert g.command("inventory") == ("You carry: tea bag.", True)
    assert g.progress() == 0
    assert g.command("put tea bag in kettle") == ("You put the tea bag in the kettle.", True)
    assert g.progress() == 1 and g.progress() == 0  # a fact counts once
    assert g.command("use stove") == ("You use the stove.", True) and g.progress() == 1 and g.score() == 1.0
    assert g.command("dance") == ("I do not understand that.", False)


def test_the_env_rewards_each_goal_fact_once_and_ends_on_the_last():
    env = ENVS.build("starling_provisional", {"max_steps": 6})
    first = env.reset({"id": 0, "prompt": "Make tea.", "game": SPEC}, seed=0)
    assert "Hall. A hall. You see: tin, rock. Exits: east." in first.messages[-1]["content"]
    rewards = []
    for cmd in SPEC["walkthrough"]:
        r = env.step(Action(cmd + "\nand then some chatter", []))  # only the first line is the command
        rewards.append(r.reward)
    assert rewards == [0.0, 0.0, 0.0, 0.5, 0.5] and r.terminated and r.info["success"]
    # the adversary: undoing and redoing a goal fact is paid once; invalid commands and chatter earn nothing
    env.reset({"id": 0, "prompt": "x", "game": SPEC}, seed=0)
    got = [env.step(Action(c, [])) for c in ["look", "open tin", "take tea bag", "east", "put tea bag in kettle",
                                               "take tea bag", "put tea bag in kettle"]]  # fmt: skip
    assert sum(r.reward for r in got) == 0.5 and got[-1].truncated and not got[-1].info["success"]
    assert [r.info["valid"] for r in got] == [True] * 7


def test_check_game_refuses_what_cannot_be_played():
    def broken(**change):
        spec = copy.deepcopy(SPEC)
        spec.update(change)
        return check_game(spec)

    assert check_game(SPEC) is None
    assert "does not reach the goal" in broken(walkthrough=["open tin"])
    assert "bad exit" in broken(rooms={"hall": {"description": "h", "exits": {"east": "nowhere"}}})
    assert "names something" in broken(goal=[{"holding": "unicorn"}])
    assert "must be one of" in broken(goal=[{"teleport": "hall"}])
    assert "start room" in broken(start="attic")
    assert "'goal' must have 1 to 6" in broken(goal=[])
    assert check_game("not a dict") == "a game is a JSON object"


def test_the_slot_filler_always_makes_playable_games():
    for idea in IDEAS:
        for seed in range(15):
            spec = slot_fill(idea, random.Random(seed))
            assert check_game(spec) is None and spec["idea"] == idea
    with pytest.raises(ValueError, match="unknown idea"):
        slot_fill("fly a kite", random.Random(0))


def test_a_models_games_are_kept_only_when_their_walkthrough_wins():
    good = slot_fill("make tea", random.Random(1))
    unplayable = {**good, "walkthrough": ["look"]}

    class Writer:
        kind, fingerprint = "scripted", "scripted"

        def complete(self, requests):
            texts = ["```json\n" + json.dumps(good) + "\n```", "I like games.", "```json\n" + json.dumps(unplayable) + "\n```"]
            return [JudgeReply(text=t) for t in texts[: len(requests)]]

    games, counts = generate_games(Asker(Writer()), ["make tea"], 3, [good])
    assert counts == {"accepted": 1, "unparsed": 1, "unplayable": 1} and games == [good]


def test_the_shipped_set_and_the_task():
    task = StarlingTask()
    train, test = task.examples("train"), task.examples("test")
    assert len(train) == 24 and len(test) == 8 and {g["game"]["idea"] for g in train} == set(IDEAS)
    walk = "\n".join(train[0]["game"]["walkthrough"])
    assert task.reward(None, [walk, "look"], [train[0]["game"]] * 2) == [1.0, 0.0]
    with pytest.raises(ValueError, match="games must be 'builtin'"):
        StarlingTask(games="missing.jsonl")
    with pytest.raises(ValueError, match="n_test must be in"):
        StarlingTask(n_test=32)


def test_bad_env_parameters_are_config_errors_before_any_model_loads():
    assert load_config(EXAMPLE, []).env.name == "starling_provisional"
    with pytest.raises(ConfigError, match="max_steps must be >= 1, got 0"):
        load_config(EXAMPLE, ["env.max_steps=0"])


@pytest.mark.slow  # one CLI run: 2 steps of the STARLING example with the tiny model
def test_covey_train_runs_the_starling_example_for_two_steps(tmp_path):
    steps = train_example("agents/starling_grpo.yaml", tmp_path / "run", 'model.name=tiny-llama', 'sampling.max_new_tokens=6')
    assert all(s["episodes/count"] == 8 for s in steps)