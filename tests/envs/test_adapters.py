"""The optional adapters: gymnasium, textarena (each skipped when its package is absent)."""

import random
import re

import pytest

from covey.envs import ENVS, Action, StepResult

FROZEN = {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False}, "actions": ["left", "down", "right", "up"]}


def act(text):
    return Action(text, [])


# ----------------------------------------------------------------------------------- gymnasium
def test_gymnasium_frozenlake_moves_anchors_invalid_and_goal():
    pytest.importorskip("gymnasium")
    env = ENVS.build("gymnasium", FROZEN)
    first = env.reset({"id": 0}, seed=0)
    assert first.anchor == 0 and first.messages[0]["content"].endswith("[S]FFF\nFHFH\nFFFH\nHFFG")
    assert "(left, down, right, up)" in first.messages[0]["content"]
    r = env.step(act("I go left"))  # off the map: stays in cell 0 (a repeated state)
    assert r.anchor == 0 and r.info == {"valid": True, "success": False} and r.reward == 0.0
    r = env.step(act("hmm"))  # no action named: not passed to the env
    assert r.info["valid"] is False and r.anchor == 0 and "not a valid action" in r.messages[0]["content"]
    r = env.step(act("UP then down"))  # the earliest name counts: up (stays at 0)
    assert r.anchor == 0
    for move, cell in (("down", 4), ("down", 8), ("right", 9), ("down", 13), ("right", 14)):
        r = env.step(act(move))
        assert r.anchor == cell and not r.done
    assert "[F]G" in r.messages[0]["content"]
    r = env.step(act("right"))
    assert r.terminated and r.reward == 1.0 and r.info["success"] and r.messages == [] and r.anchor == 15
    env.reset({"id": 0}, seed=0)
    r = env.step(act("right")) and env.step(act("down"))  # cell 1 -> 5, a hole
    assert r.terminated and r.reward == 0.0 and r.info["success"] is False
    env.close()


def test_gymnasium_integer_actions_tuple_anchors_and_item_seed():
    pytest.importorskip("gymnasium")
    taxi = ENVS.build("gymnasium", {"id": "Taxi-v4"})
    assert "an integer from 0 to 5" in taxi.instructions
    assert taxi.parse("go 7 then 3") == 3 and taxi.parse("-1 or 9") is None
    a = taxi.reset({"id": 0}, seed=1).anchor
    assert taxi.reset({"id": 5, "seed": 1}, seed=99).anchor == a  # the item's seed wins
    bj = ENVS.build("gymnasium", {"id": "Blackjack-v1", "observation": "text", "actions": ["stick", "hit"]})
    first = bj.reset({"id": 0}, seed=1)
    assert isinstance(first.anchor, tuple) and first.messages[0]["content"].endswith(str(first.anchor))
    r = bj.step(act("stick"))
    assert r.terminated and r.info["success"] == (r.reward > 0)


def echo_text_env():
    """A Gymnasium env with Text observations and actions: reward 1 when the action repeats the word."""
    import gymnasium as gym

    class EchoText(gym.Env):
        observation_space = gym.spaces.Text(8)
        action_space = gym.spaces.Text(8, charset="abcdefghijklmnopqrstuvwxyz")

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.word = ["apple", "pear", "plum"][seed % 3]
            return self.word, {}

        def step(self, action):
            return "done", float(action == self.word), True, False, {}

    return EchoText()


def test_gymnasium_text_spaces_and_config_errors():
    gym = pytest.importorskip("gymnasium")
    if "CoveyEchoText-v0" not in gym.registry:
        gym.register("CoveyEchoText-v0", entry_point=echo_text_env, disable_env_checker=True)
    env = ENVS.build("gymnasium", {"id": "CoveyEchoText-v0"})
    first = env.reset({"id": 0}, seed=4)
    assert first.anchor == "pear" and first.messages[0]["content"].endswith("\n\npear")
    assert env.step(act("  Pear!")).info["valid"] is False  # not in the Text space's charset
    r = env.step(act(" pear\n"))
    assert r.terminated and r.reward == 1.0 and r.info["success"]
    with pytest.raises(ValueError, match="Taxi-v4"):
        ENVS.build("gymnasium", {"id": "Taxi-v3"})
    with pytest.raises(ValueError, match="has 4 actions, `actions` names 2"):
        ENVS.build("gymnasium", {**FROZEN, "actions": ["a", "b"]})
    with pytest.raises(ValueError, match="only Text and Discrete"):
        ENVS.build("gymnasium", {"id": "MountainCarContinuous-v0"})
    with pytest.raises(ValueError, match="no ansi render mode"):
        ENVS.build("gymnasium", {"id": "CoveyEchoText-v0", "observation": "render"})


# ----------------------------------------------------------------------------------- textarena
def first_free(observation: str) -> str:
    """A TicTacToe opponent: the first available cell."""
    return "[" + re.findall(r"\[(\d+)\]", observation.split("Available Moves:")[-1])[0] + "]"


def test_textarena_single_player_game_rewards_invalid_and_private_random():
    pytest.importorskip("textarena")
    env = ENVS.build("textarena", {"game": "GuessTheNumber-v0"})
    random.seed(5)
    expected = random.random()
    random.seed(5)
    first = env.reset({"id": 0}, seed=3)
    target = env.env.game_number
    assert "Guess The Number" in first.messages[0]["content"] and first.anchor == f"{{'game_number': {target}, 'guess_history': []}}"
    low = 1 if target != 1 else 2
    r = env.step(act(f"[{low}]"))
    assert r.messages[0]["content"] == f"The target number is {'higher' if low < target else 'lower'}." and r.info["valid"]
    r = env.step(act("no brackets"))
    assert r.info["valid"] is False and "attempted an invalid move" in r.messages[0]["content"] and not r.done
    r = env.step(act(f"I say [{target}]"))
    assert r.terminated and r.reward == 1.0 and r.info["success"] and r.messages == []
    assert random.random() == expected  # the game's random state is its own
    again = ENVS.build("textarena", {"game": "GuessTheNumber-v0"})
    again.reset({"id": 0}, seed=3)
    assert again.env.game_number == target  # seeded


def test_textarena_two_player_game_with_an_opponent():
    pytest.importorskip("textarena")
    with pytest.raises(ValueError, match="needs an `opponent`"):
        ENVS.build("textarena", {"game": "TicTacToe-v0", "num_players": 2})
    with pytest.raises(ValueError, match="not found"):
        ENVS.build("textarena", {"game": "NoSuchGame-v0"})
    env = ENVS.build("textarena", {"game": "TicTacToe-v0", "num_players": 2, "opponent": "tests.envs.test_adapters:first_free"})
    first = env.reset({"id": 0}, seed=0)
    assert "Tic Tac Toe" in first.messages[0]["content"] and first.anchor == repr({"board": [[""] * 3] * 3})
    for move, board in (("[4]", "[['X', '', ''], ['', 'O', ''], ['', '', '']]"),
                        ("[8]", "[['X', 'X', ''], ['', 'O', ''], ['', '', 'O']]"),
                        ("[2]", "[['X', 'X', 'O'], ['X', 'O', ''], ['', '', 'O']]")):  # fmt: skip
        r = env.step(act(move))
        assert r.anchor == "{'board': " + board + "}" and not r.done and r.info["valid"]
    r = env.step(act("[6]"))  # O on the diagonal 2-4-6
    assert r.terminated and r.reward == 1.0 and r.info["success"]
    assert isinstance(r, StepResult)


def test_a_missing_extra_is_a_one_line_config_error(monkeypatch):
    import sys

    from covey.train.config import ConfigError, load_config

    monkeypatch.setitem(sys.modules, "gymnasium", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'covey\[gymnasium\]'"):
        load_config(None, ["env.name=gymnasium", "env.id=FrozenLake-v1", "rollout.strategy.name=episodes", "task.name=maze"])
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ConfigError, match=r"pip install 'covey\[search\]'"):
        load_config(None, ["env.name=search_qa", "rollout.strategy.name=episodes", "task.name=search_qa"])
