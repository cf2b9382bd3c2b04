"""`fork()`: a live environment copied into independent continuations (turn-level trees)."""

import threading

import pytest

from covey.envs import ENVS, Action, ToolCall, fork_env

MAZE = ["A.#", "#..", "#.G"]


def act(text, calls=()):
    return Action(text, [], list(calls))


def test_maze_fork_branches_one_state_into_independent_continuations():
    env = ENVS.build("maze", {"max_steps": 4})
    env.reset({"maze": MAZE}, seed=0)
    env.step(act("right"))  # (0, 0) -> (0, 1)
    child = fork_env(env)
    assert child is not env and child.pos == (0, 1) and child.steps == 1
    a = env.step(act("down"))  # (1, 1)
    b = child.step(act("right"))  # (0, 2) is a wall: stays at (0, 1)
    assert a.anchor == "..#\n#A.\n#.G" and a.messages[0]["content"].startswith("OK.")
    assert b.anchor == ".A#\n#..\n#.G" and b.messages[0]["content"].startswith("You hit a wall.")
    assert env.pos == (1, 1) and child.pos == (0, 1)
    # each branch counts its own steps (max_steps 4): after the fork the original takes two more, the child one
    assert not env.step(act("up")).done and (env.steps, child.steps) == (3, 2)
    assert env.step(act("up")).truncated and not child.step(act("down")).done and child.pos == (1, 1)
    child.rows[0] = "###"  # the maze rows are copied, not shared
    assert env.rows[0] == "A.#"


def test_calculator_and_search_qa_forks_count_calls_independently():
    calc = ENVS.build("calculator", {"max_calls": 2})
    calc.reset({"id": 0, "prompt": "2+3?", "answer": "5"}, seed=0)
    call = ToolCall("calculator", {"expression": "2+3"})
    calc.step(act("", [call]))
    child = fork_env(calc)
    assert child.step(act("", [call])).truncated  # the child's second call
    assert calc.calls == 1 and child.calls == 2
    r = calc.step(act("it is 5"))
    assert r.terminated and r.reward == 1.0
    pytest.importorskip("bm25s")
    from covey.tasks.search_qa import SearchQATask

    item = SearchQATask(n_entities=4, n_train=2, n_test=0).examples("train")[0]
    env = ENVS.build("search_qa", {"max_calls": 2})
    env.reset(item, seed=0)
    child = fork_env(env)
    assert child.index is env.index  # the read-only index is shared
    child.step(act("", [ToolCall("search", {"query": item["prompt"]})]))
    assert child.calls == 1 and env.calls == 0
    assert env.step(act(item["answer"])).reward == 1.0 and child.step(act("no idea")).reward == 0.0


def test_fork_env_without_fork_is_a_clear_error():
    class NoFork:
        tools = None

    with pytest.raises(NotImplementedError, match="NoFork has no fork"):
        fork_env(NoFork())


def test_gymnasium_fork_and_an_env_that_cannot_be_copied():
    gym = pytest.importorskip("gymnasium")
    env = ENVS.build("gymnasium", {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False},
                                   "actions": ["left", "down", "right", "up"]})  # fmt: skip
    env.reset({"id": 0}, seed=0)
    assert env.step(act("down")).anchor == 4
    child = fork_env(env)
    assert child.step(act("right")).anchor == 5  # a hole: the child's game ends
    assert env.step(act("down")).anchor == 8 and not env.step(act("right")).done  # the original goes on (cell 9)

    class Locked(gym.Env):
        observation_space = gym.spaces.Text(8)
        action_space = gym.spaces.Text(8)

        def __init__(self):
            self.lock = threading.Lock()  # cannot be deep-copied

        def reset(self, *, seed=None, options=None):
            return "go", {}

        def step(self, action):
            return "done", 0.0, True, False, {}

    if "CoveyLocked-v0" not in gym.registry:
        gym.register("CoveyLocked-v0", entry_point=Locked, disable_env_checker=True)
    locked = ENVS.build("gymnasium", {"id": "CoveyLocked-v0"})
    locked.reset({"id": 0}, seed=0)
    with pytest.raises(NotImplementedError, match="CoveyLocked-v0 cannot be forked"):
        fork_env(locked)


def test_textarena_fork_copies_the_game_and_its_random_state():
    pytest.importorskip("textarena")
    env = ENVS.build("textarena", {"game": "GuessTheNumber-v0"})
    env.reset({"id": 0}, seed=3)
    target = env.env.game_number
    low = 1 if target != 1 else 2
    env.step(act(f"[{low}]"))
    child = fork_env(env)
    assert child.env is not env.env and child.env.game_number == target
    assert child.step(act(f"[{target}]")).reward == 1.0  # the child wins ...
    other = next(n for n in range(1, 21) if n not in (low, target))
    r = env.step(act(f"[{other}]"))  # ... the original is still playing
    assert not r.done and len(env.env.state.game_state["guess_history"]) == 2
